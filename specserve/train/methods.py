"""`train-draft --method` names: each method is named by the --spec-type that serves what it trains.
The short names (dflash, dspark, eagle3, mtp) are accepted as aliases."""
from __future__ import annotations

BLOCK_METHODS = ("draft-dflash", "draft-dspark")
CHAIN_TRAINERS = {                       # method -> module with add_arguments(group) and train(job)
    "draft-simple": "specserve.train.train_draft_simple",
    "draft-eagle3": "specserve.train.train_eagle3",
    "draft-mtp": "specserve.train.train_mtp",
}
METHODS = (*BLOCK_METHODS, *CHAIN_TRAINERS)
ALIASES = {"dflash": "draft-dflash", "dspark": "draft-dspark", "eagle3": "draft-eagle3", "mtp": "draft-mtp"}


def canonical_method(name: str) -> str:
    return ALIASES.get(name, name)
