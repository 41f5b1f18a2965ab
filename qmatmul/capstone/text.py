"""The capstone's text: the sentences, the scored sentence pairs, and the token ids the model takes.

The token ids come from all-MiniLM-L6-v2's own tokenizer (the tokenizer.json its package ships, read by the
`tokenizers` library), set as sentence-transformers runs it: [CLS] ... [SEP], truncated at the model's
max_seq_length (256), no padding (features() pads a batch). tests/test_capstone.py checks them against the ids
sentence-transformers gave. The pair scores (0 = unrelated … 5 = same meaning) are the chapter's own labels, in the
manner of STS-B.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import torch

from qmatmul.capstone.weights import library, tokenizer_file

MAX_SEQ_LENGTH = 256  # sentence_bert_config.json's max_seq_length, where the model's folder lacks that file

SENTENCES = [
    "A man is playing a guitar.",
    "A woman is slicing an onion.",
    "The cat sleeps on the warm windowsill.",
    "Stock markets fell sharply on Monday.",
    "The train to Berlin leaves at nine.",
    "She plants tomatoes in her garden.",
    "A child is riding a red bicycle.",
    "The recipe needs two cups of flour.",
    "Heavy rain flooded the streets overnight.",
    "He fixed the bug in the compiler.",
    "The orchestra played a quiet symphony.",
    "Two dogs are running across the beach.",
    "The museum opens its new wing tomorrow.",
    "A pilot lands the plane in fog.",
    "The soup is too salty to eat.",
    "Students are reading in the library.",
    "The bridge was closed for repairs.",
    "A kitten chases a ball of yarn.",
    "Quantized weights save memory bandwidth.",
    "The team won the championship final.",
    "Fresh bread smells wonderful in the morning.",
    "The volcano erupted without warning.",
    "She answered the phone with a smile.",
    "Our flight was delayed by three hours.",
]

PAIRS = [
    ("A man is playing a guitar.", "A man plays an acoustic guitar.", 4.8),
    ("A man is playing a guitar.", "A person is making music.", 3.2),
    ("A man is playing a guitar.", "A woman is slicing an onion.", 0.4),
    ("A woman is slicing an onion.", "Someone is chopping vegetables.", 3.8),
    ("The cat sleeps on the warm windowsill.", "A cat is napping by the window.", 4.5),
    ("The cat sleeps on the warm windowsill.", "A kitten chases a ball of yarn.", 2.0),
    ("Stock markets fell sharply on Monday.", "Shares dropped at the start of the week.", 4.4),
    ("Stock markets fell sharply on Monday.", "The team won the championship final.", 0.2),
    ("The train to Berlin leaves at nine.", "Our flight was delayed by three hours.", 1.2),
    ("The train to Berlin leaves at nine.", "The Berlin train departs at 9 o'clock.", 4.9),
    ("Heavy rain flooded the streets overnight.", "The roads were under water after the storm.", 4.2),
    ("Heavy rain flooded the streets overnight.", "The volcano erupted without warning.", 1.0),
    ("He fixed the bug in the compiler.", "The programmer repaired a software error.", 4.0),
    ("He fixed the bug in the compiler.", "She plants tomatoes in her garden.", 0.1),
    ("Two dogs are running across the beach.", "Dogs play on the sand by the sea.", 4.1),
    ("Two dogs are running across the beach.", "A child is riding a red bicycle.", 0.8),
    ("The soup is too salty to eat.", "The recipe needs two cups of flour.", 1.1),
    ("The soup is too salty to eat.", "This dish has far too much salt.", 4.3),
    ("Students are reading in the library.", "People study books in a quiet room.", 3.6),
    ("The bridge was closed for repairs.", "The museum opens its new wing tomorrow.", 0.9),
    ("A pilot lands the plane in fog.", "An aircraft touches down in poor visibility.", 4.4),
    ("The orchestra played a quiet symphony.", "Musicians performed soft classical music.", 4.0),
    ("Fresh bread smells wonderful in the morning.", "The bakery is open early.", 2.4),
    ("She answered the phone with a smile.", "She ignored the ringing phone.", 1.6),
]


def pair_sentences() -> list[str]:
    """The sentences of PAIRS, each once, in order."""
    return list(dict.fromkeys(s for a, b, _ in PAIRS for s in (a, b)))


@functools.cache
def _tokenizer(path: str):
    tok = library("tokenizers").Tokenizer.from_file(path)
    config = Path(path).parent / "sentence_bert_config.json"
    length = json.loads(config.read_text())["max_seq_length"] if config.is_file() else MAX_SEQ_LENGTH
    tok.enable_truncation(max_length=length)  # tokenizer.json says 128: the hub export's, not the model's
    tok.no_padding()
    return tok


def tokenizer():
    """all-MiniLM-L6-v2's tokenizer (a tokenizers.Tokenizer), as sentence-transformers runs it."""
    return _tokenizer(str(tokenizer_file()))


def token_ids(sentences) -> list[list[int]]:
    """The token ids of each sentence: [CLS] (101), the word pieces, [SEP] (102)."""
    tok = tokenizer()
    return [tok.encode(s).ids for s in sentences]


def features(sentences, device) -> dict:
    """Token ids (token_ids: the model's own tokenizer) padded into a batch: input_ids, attention_mask."""
    ids = token_ids(sentences)
    T = max(len(i) for i in ids)
    input_ids = torch.zeros(len(ids), T, dtype=torch.long)
    mask = torch.zeros(len(ids), T, dtype=torch.long)
    for r, i in enumerate(ids):
        input_ids[r, : len(i)] = torch.tensor(i)
        mask[r, : len(i)] = 1
    return {"input_ids": input_ids.to(device), "attention_mask": mask.to(device),
            "token_type_ids": torch.zeros_like(input_ids).to(device)}  # fmt: skip
