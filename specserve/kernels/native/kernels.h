// The C interface of the kernel library (called from Python through ctypes) and the structs
// shared between its files. Weights are packed once at load time into 16-column blocks.
#pragma once
#include <cstdint>
#include <vector>

extern "C" {

enum { SS_W_F32 = 0, SS_W_BF16 = 1, SS_W_I8 = 2, SS_W_Q8 = 3 };
enum { SS_OUT_STORE = 0, SS_OUT_ADD = 1, SS_OUT_SWIGLU = 2 };

// A packed weight W [n, k] (y = x W^T + bias). Layout per 16-column block:
//   F32  [k][16] float;  BF16 [k_padded/2][16][2] bf16;  I8 [k][16] int8 with scales[n] per column;
//   Q8   [16] int32 column sums, then [k_padded/4][16][4] int8, scales[n] per column (the rows are
//        rounded to int8 too, gemm_q8.cpp).
// For SS_OUT_SWIGLU the blocks alternate gate block j, up block j (n = 2 * width).
struct ss_weight {
    const void* data;
    const float* scales;      // I8 and Q8 only
    const float* bias;        // nullable, [n]
    int32_t type;
    int32_t n;
    int32_t k;
    int32_t act;              // activation for SS_OUT_SWIGLU
};

struct ss_layer {
    ss_weight qkv, o, gate_up, down;
    const float* input_norm;  // [hidden]
    const float* post_norm;   // [hidden]
    const float* q_norm;      // [head_dim] or null
    const float* k_norm;      // [head_dim] or null
};

struct ss_model {
    int32_t hidden, intermediate_padded, n_heads, n_kv_heads, head_dim, n_layers;
    float eps;
    const ss_layer* layers;
    const float* final_norm;  // [hidden]
    ss_weight head;           // lm_head (vocab rows)
    const void* embed;        // [vocab, hidden] f32 or bf16 (embed_type as ss_weight type)
    int32_t embed_type;
    int32_t vocab;
};

// Attention context of one forward: every row has a slot, a position and the number of keys it sees.
struct ss_attn {
    const int64_t* row_slot;
    const int64_t* row_pos;
    const int64_t* key_len;   // keys [0, key_len) of the row's slot; null: causal (row_pos + 1)
    const float* cos;         // rope tables [*, head_dim], row r uses rope_index[r]
    const float* sin;
    const int64_t* rope_index;
    void* k_cache;            // [layers, slots, kv_heads, capacity, head_dim] (keys transposed per 16 positions)
    void* v_cache;
    int64_t n_slots, capacity;
    int32_t k_type, v_type;   // element types: 0 float32, 1 float16, 2 bfloat16
};

struct ss_step {
    int64_t n_rows;
    const int64_t* tokens;    // [n_rows]
    ss_attn attn;
    int32_t n_taps;
    const int32_t* tap_layers;    // -1 = embedding output, -2 = the final normed state
    // tap i of row r is column block i of row r of [n_rows, n_taps * hidden] (tap_slot_rows 0), or of row
    // row_slot[r] * tap_slot_rows + row_pos[r] of a per-slot store [slots, tap_slot_rows, n_taps * hidden]
    float* tap_out;
    int64_t tap_slot_rows;
    int64_t n_out;
    const int64_t* out_rows;
    float* logits;                // [n_out, vocab] or null
    int64_t* argmax;              // [n_out] greedy token of each output row (first maximum), or null
    float* final_hidden;          // [n_rows, hidden] or null
};

int32_t ss_version(void);
int32_t ss_features(void);        // bits: 1 AVX-512, 2 AVX-512 BF16, 4 AMX, 8 AMX equals AVX-512 BF16,
                                  // 16 AVX-512 VNNI, 32 AVX2 + FMA (no AVX-512)
void ss_set_threads(int32_t n);
int32_t ss_get_threads(void);
void ss_set_spin_us(int32_t us);
void ss_pool_stats(int64_t* out);   // [jobs, jobs run alone, times a busy core sent the pool solo]
int64_t ss_packed_bytes(int32_t type, int64_t n, int64_t k);
// src: [n, k] row-major, f32 (src_bf16 = 0) or bf16 (1) for F32/BF16; int8 for I8
void ss_pack(int32_t type, const void* src, int32_t src_bf16, int64_t n, int64_t k, void* dst);
void ss_linear(const ss_weight* w, const float* x, int64_t m, int64_t ldx, float* out, int64_t ldo, int32_t mode);
void ss_rms_norm(const float* x, const float* weight, float* out, int64_t m, int64_t dim, float eps);
// one decoder layer over n_rows query rows (residual x, updated in place); when prefix_rows > 0 the
// first prefix_rows rows of the attention context only write keys and values, from `prefix_input`
// ([prefix_rows, qkv.k], already normed); `input` (nullable, [n_rows, qkv.k]) replaces rms_norm(x).
void ss_layer_forward(const ss_model* m, int32_t layer, float* x, int64_t n_rows, const float* input,
                      int64_t prefix_rows, const float* prefix_input, const ss_attn* attn);
int32_t ss_model_forward(const ss_model* m, const ss_step* step);
// How a draft chain picks slot s's token at step j: the argmax, or when temperature[s] > 0 a draw with
// uniforms[s, j] from q = the request's own sampler (top_k[s], top_p[s], min_p[s], then temperature[s];
// sampler.cpp) over the draft's logits, written to q [n_slots, n_steps, q_vocab] laid out over the target's
// vocabulary (zeros outside an id_map's tokens). With p_min > 0 the chain also writes top_prob[s, j], the
// largest of softmax(p_min_k largest logits) (llama.cpp's --draft-p-min test over its top 10), and stops
// once every slot has had one below p_min (its later drafts unused).
struct ss_chain_pick {
    int32_t p_min_k;              // <= 64
    int64_t n_steps;
    const float* temperature;     // [n_slots], 0: the argmax
    const int32_t* top_k;         // [n_slots]
    const float* top_p;           // [n_slots]
    const float* min_p;           // [n_slots]
    const double* uniforms;       // [n_slots, n_steps]
    float* q;                     // [n_slots, n_steps, q_vocab]
    int64_t q_vocab;
    float p_min;
    float* top_prob;              // [n_slots, n_steps], zeros past where the chain stopped
};
// A draft chain: `first` (logits set, one output row per slot, in slot order), then n_more steps that
// each feed every slot's last draft at the next position. drafts [n_out, 1 + n_more]; pick null: argmax.
// id_map [vocab] (null: none) maps the lm_head's rows to token ids (an lm_head cut to some tokens).
int32_t ss_model_draft_chain(const ss_model* m, const ss_step* first, int64_t n_more, const ss_chain_pick* pick,
                             const int64_t* id_map, int64_t* drafts);
// probs [n_rows, vocab]: the distribution sampling draws from (top-k, top-p, min-p, then temperature)
void ss_sampling_probs(const float* logits, int64_t n_rows, int64_t vocab, int32_t top_k, float top_p, float min_p,
                       float temperature, float* probs);
// tokens[r]: a draw from row r of probs given uniforms[r] in [0, 1)
void ss_sample(const float* probs, int64_t n_rows, int64_t vocab, const double* uniforms, int64_t* tokens);
// one slot's verification from its logits rows [k + 1, vocab] (speculative/verify.py): rejection sampling
// with q rows [k, vocab], or sample and compare with q null; returns the number accepted, *token the
// target's token after them (-1: a draft token outside the vocabulary); uniforms [k + 1]
int64_t ss_verify_logits(const float* logits, int64_t k, int64_t vocab, int32_t top_k, float top_p, float min_p,
                         float temperature, const float* q, const int64_t* draft, const double* uniforms,
                         int64_t* token);
// A block drafter's whole draft (DFlash / DSpark): the context rows through fc and its norm, then
// the block rows (embedded with m's embedding, the target's) through every layer, attending to the
// context rows as key/value-only prefix rows; the final-normed block rows go to hidden_out. With
// logits set, the draft rows (from first_draft_row of each block) also go through m's head (the
// target's lm_head) and the chain picks the drafts: logits[s, k] += W2 · w1[prev] when w2t is set
// (prev = anchors[s], then draft k-1), then tokens[s, k] = argmax, or with uniforms and temperature[s] > 0
// a draw from q[s, k] = the slot's sampler (top_k, top_p, min_p, then T) over the logits with
// uniforms[s, k] (q is written: the verifier's q).
struct ss_block_draft {
    int64_t n_ctx;
    // the context rows' features [n_ctx, fc.k], as n_parts column blocks (one per tapped layer) of
    // n_chunks row ranges: part p of chunk c is ctx_parts[c * n_parts + p], [ctx_chunk_rows[c], fc.k / n_parts]
    int64_t n_chunks, n_parts;
    const int64_t* ctx_chunk_rows;
    const float* const* ctx_parts;
    ss_weight fc;
    const float* hidden_norm;     // [hidden]
    int64_t n_slots, n_block;
    const int64_t* block_tokens;  // [n_slots * n_block]
    // the rows: the n_ctx context rows first, then the block rows. With attn.row_slot null the kernel
    // derives them from these: context rows (ctx_slot, ctx_pos) write keys only; slot s's block rows
    // are at pos0[s] .. pos0[s] + n_block - 1 and each sees its slot's keys up to the block's end;
    // RoPE rows are indexed by position
    const int64_t* ctx_slot;      // [n_ctx]
    const int64_t* ctx_pos;       // [n_ctx]
    const int64_t* slot;          // [n_slots]
    const int64_t* pos0;          // [n_slots]
    ss_attn attn;
    float* hidden_out;            // [n_slots * n_block, hidden]
    int64_t first_draft_row, n_draft;
    float* logits;                // [n_slots, n_draft, vocab] or null (then nothing below is read)
    int64_t* tokens;              // [n_slots, n_draft]
    const uint16_t* w2t;          // [rank, vocab] bf16, or null (no Markov head)
    const float* w1;              // [vocab, rank]
    int64_t rank;
    const float* markov_table;    // [vocab, vocab] or null: row t is W2 W1[t] (ss_markov_table), read instead
    const int64_t* anchors;       // [n_slots]
    const float* temperature;     // [n_slots] or null
    const int32_t* top_k;         // [n_slots]: with temperature, the rest of each slot's sampler (sampler.cpp)
    const float* top_p;           // [n_slots]
    const float* min_p;           // [n_slots]
    const double* uniforms;       // [n_slots, n_draft] or null
    float* q;                     // [n_slots, n_draft, q_vocab], written for the sampled slots: over the
    int64_t q_vocab;              // target's vocabulary (with id_map, zeros outside its tokens)
    // DSpark's confidence head (one linear layer over [draft row, W1[prev]] and a sigmoid): the Markov
    // part folded into a per-token term. confidence null: no head.
    const float* conf_w;          // [hidden]
    const float* conf_per_token;  // [vocab] or null
    float conf_bias;
    float* confidence;            // [n_slots, n_draft]
    // null, or [vocab]: the token id of each lm_head row (an lm_head cut to some tokens, --spec-draft-vocab;
    // logits, q, w2t and the table's rows then have its vocab columns, while tokens, anchors, W1's rows, the
    // table's row index and conf_per_token stay token ids)
    const int64_t* id_map;
};
int32_t ss_block_draft_forward(const ss_model* m, const ss_block_draft* d);
// table [vocab, vocab]: row t = W2 W1[t], the Markov bias after token t, with the bits the draft call's own
// arithmetic gives (w1 [vocab, rank] float32, w2t [rank, vocab] bfloat16)
void ss_markov_table(const float* w1, const uint16_t* w2t, int64_t rank, int64_t vocab, float* table);
// ngram-mod's pool entries [size] (-1: empty): add the n-grams tokens[i..i+n) -> tokens[i+n], i in
// [start, stop), in order (returns how many writes found the entry occupied); draft chained lookups from
// the hash of window [n] into out [n_max] (returns the draft's length, 0 when it breaks off before n_min)
int64_t ss_ngram_mod_add(int32_t* entries, int64_t size, const int64_t* tokens, int64_t start, int64_t stop,
                         int32_t n);
int64_t ss_ngram_mod_draft(const int32_t* entries, int64_t size, const int64_t* window, int32_t n,
                           int64_t n_min, int64_t n_max, int64_t* out);
// A hidden-state draft head's draft chain (EAGLE-3, MTP). m holds the head's decoder layers, its final
// norm, its lm_head (vocab = the head's output rows) and the embedding the tokens are looked up in.
// Each row combines parts = [embed_norm(embed(token)), hidden_norm(hidden)] (hidden first when
// hidden_first; the embedding is zeroed at position 0 when zero_embed_at_pos0); with proj set (MTP) the
// residual stream starts at proj(parts) and every layer runs as usual; without (EAGLE-3) layer 0 reads
// parts and its residual is the hidden row (its normed form when residual_normed). An output row gives
// the draft argmax(head(final_norm(x))), mapped through id_map when set, and feeds back x, or the normed
// row when feed_normed (the draft is picked by `pick`, null: argmax). The first step is the given rows
// (output rows: one per slot, in slot order); then n_more steps feed every slot's last draft and hidden
// row at the next position. drafts [n_out, 1 + n_more].
struct ss_head_chain {
    int64_t n_rows;
    const int64_t* tokens;        // [n_rows]
    const float* hidden_in;       // [n_rows, hidden]
    ss_attn attn;
    int64_t n_out;
    const int64_t* out_rows;      // [n_out]
    const float* embed_norm;      // [hidden]
    const float* hidden_norm;     // [hidden]
    ss_weight proj;               // data null: none
    const int64_t* id_map;        // [vocab] or null
    int32_t hidden_first, zero_embed_at_pos0, residual_normed, feed_normed;
    ss_weight fc;                 // data null: none; else hidden_in holds [n_rows, fc.k] target features
                                  // that fc projects to the first step's hidden rows (EAGLE-3)
};
int32_t ss_head_draft_chain(const ss_model* m, const ss_head_chain* h, int64_t n_more, const ss_chain_pick* pick,
                            int64_t* drafts);
}

namespace ss {
// internal entry points shared between files
void gemm(const ss_weight& w, const float* x, int64_t m, int64_t ldx, float* out, int64_t ldo, int mode);
void attention_layer(const ss_model& m, int layer, float* qkv, int64_t ld_qkv, int64_t n_rows, int64_t prefix_rows,
                     const ss_attn& attn, float* ctx);
void rms_norm_rows(const float* x, int64_t ldx, const float* weight, float* out, int64_t ldo, int64_t m,
                   int64_t dim, float eps);
int64_t argmax(const float* x, int64_t n);
void layer_forward(const ss_model& m, int layer, float* x, int64_t n, const float* input, int64_t prefix,
                   const float* prefix_input, const ss_attn& a);
void embed_rows(const ss_model& m, const int64_t* tokens, int64_t n, float* x);
void dense_softmax(const float* x, int64_t vocab, float temperature, float* probs);
// probs [vocab]: the distribution sampling draws from (top-k, top-p, min-p, then temperature); kept and
// heap are the caller's scratch
void row_probs(const float* x, int64_t vocab, int32_t top_k, float top_p, float min_p, float temperature,
               float* probs, std::vector<int32_t>& kept, std::vector<float>& heap);
// a draft's draw with uniform u from a request's sampler over its logits [vocab]; q [q_vocab] gets the
// distribution drawn from over the target's vocabulary (id_map [vocab]: each logit column's token id, zeros
// for the others; null: the columns are the token ids). Returns the logit column drawn.
int64_t draw_draft(const float* logits, int64_t vocab, int32_t top_k, float top_p, float min_p, float temperature,
                   double u, const int64_t* id_map, float* q, int64_t q_vocab);
int64_t draw_row(const float* p, int64_t vocab, double u);
bool chain_cut_everywhere(const ss_chain_pick* p, int64_t n_slots, int64_t step);   // p_min stops every slot
// a chain that stopped before step `stopped_at` (p_min cut every slot): its last pick and the steps not
// run were never fed, so their drafts [n_slots, 1 + n_more] become -1 (a drafter's cache never claims them)
void mark_unfed_drafts(int64_t* drafts, int64_t n_slots, int64_t n_more, int64_t stopped_at);
int64_t pick_draft(const ss_chain_pick* p, int64_t slot, int64_t step, const float* logits, int64_t vocab,
                   const int64_t* id_map);
}
