"""A plain-loop transcription of llama.cpp's ngram-map algorithm (common/ngram-map.cpp,
docs/reference/llamacpp-speculative.md §5.2). begin() is llama.cpp's: it trusts that a new prompt
continues what the map indexed. k4v drafts the tokens after the latest match, as llama.cpp does, or
with draft="winner" those of the winning continuation (llama.cpp PR #28431). Tests compare the
vectorised implementation with it on random sessions of requests."""
SIZE = 262144


def h32(tokens):
    h = 0
    for t in tokens:
        h = (h * 2654435761 + t) % 2 ** 32
    return h


class ReferenceMap:
    def __init__(self, n, m, key_only, min_hits, draft="latest"):
        self.n, self.m, self.key_only, self.min_hits = n, m, key_only, min_hits
        self.draft_winner = draft == "winner"
        self.key_map = {}                      # sparse uint32[SIZE]
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.keys = []                         # [key_idx, stat_idx, key_num, [[value_idx, value_num, n_acc] x4]]
        self.last = None

    def begin(self, tokens):
        n, m = self.n, self.m
        size_begin = len(tokens)
        cleanup = self.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - n - m if size_begin > n + m else 0
        if size_begin < self.idx_last_check:
            self.key_map = {s: k for s, k in self.key_map.items() if k < cleanup}
            self.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            for i in range(len(self.keys) - 1, -1, -1):
                key = self.keys[i]
                if key[0] >= cleanup:
                    del self.keys[i]
                    continue
                if self.key_only:
                    continue
                for j in range(3, -1, -1):
                    if key[3][j][0] != 0 and key[3][j][0] >= cleanup:
                        del key[3][j]
                        key[3].append([0, 0, m])
                if key[3][0][0] == 0:
                    del self.keys[i]
        self.idx_last_check = size_begin
        self.size_last_begin = size_begin

    def draft(self, inp, sampled):
        inp = list(inp)
        n, m = self.n, self.m
        self.last = None
        L = len(inp)
        if L < 2 * n + m:
            return []
        assert self.idx_last_check <= L and self.size_last_begin <= L
        self.idx_last_check = L
        key = inp[L - n + 1:] + [sampled]
        match = 0
        k = self.key_map.get(h32(key) % SIZE, 0)
        if k != 0 and k < L - n - m - 1 and inp[k:k + n] == key:
            match = k
        if match == 0 and self.size_last_begin > n + m + 1:
            j = self.size_last_begin - n - m - 1
            while j > self.key_map_last_idx:
                if inp[j:j + n] == key:
                    match = j
                    break
                j -= 1
        if match == 0:
            j = L - n - m - 1
            while j > self.size_last_begin and j > self.key_map_last_idx:
                if inp[j:j + n] == key:
                    match = j
                    break
                j -= 1
        if self.size_last_begin > n + m + 1:
            j = self.size_last_begin - n - m - 1
            while j > self.key_map_last_idx:
                self.key_map.setdefault(h32(inp[j:j + n]) % SIZE, j)
                j -= 1
        j = L - n - m - 1
        while j > self.size_last_begin and j > self.key_map_last_idx:
            self.key_map.setdefault(h32(inp[j:j + n]) % SIZE, j)
            j -= 1
        self.key_map_last_idx = max(L - n - m - 1, self.key_map_last_idx)
        if match == 0:
            return []
        cur = next((kk for kk in self.keys if inp[kk[0]:kk[0] + n] == key), None)
        if cur is None:
            cur = [match, 0, 0, [[0, 0, m] for _ in range(4)]]
            self.keys.append(cur)
        cur[2] = min(cur[2] + 1, 16380)
        if self.key_only:
            self.last = (cur, 0)
            return inp[match + n:match + n + min(m, cur[3][0][2])]
        if cur[2] < self.min_hits:
            return []
        for i in range(cur[1], match + 1):
            if inp[i:i + n] != key:
                continue
            slot = -1
            for v in range(4):
                if cur[3][v][0] == 0:
                    cur[3][v] = [i + n, 0, m]
                    slot = v
                    break
                if inp[i + n:i + n + m] == inp[cur[3][v][0]:cur[3][v][0] + m]:
                    slot = v
                    break
            if slot >= 0:
                cur[3][slot][1] = min(cur[3][slot][1] + 1, 16380)
        cur[1] = match
        best, best_num = 0, 0
        for v in range(4):
            if cur[3][v][1] > best_num:
                best, best_num = v, cur[3][v][1]
        others = sum(cur[3][v][1] for v in range(4) if v != best)
        if others > 0 and best_num < 2 * others:
            return []
        value = cur[3][best]
        self.last = (cur, best)
        start = value[0] if self.draft_winner else match + n
        return inp[start:start + min(m, value[2])]

    def accept(self, n_accepted):
        if self.last is not None:
            self.last[0][3][self.last[1]][2] = n_accepted
