"""Tokenize a text dataset once into a token tensor, then read it as one token stream cut into blocks
of any length with ``blocks()``, never holding the stream in memory (seed: Archai's memory-mapped token
cache). Rerunning the same checkpointed eval is a no-op: the dataset remembers it finished."""

import json
import re

import numpy as np

import lakecompute as lc

WORDS = ["the", "a", "lake", "data", "model", "token", "worker", "fast", "safe", "parallel", "image", "text"]
EOS = 0  # end of document; 1 is the unknown word


def make_corpus(n, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(3, 12))).capitalize() + "." for _ in range(n)]


def train_vocab(texts, path):
    words = sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})
    vocab = {"<eos>": EOS, "<unk>": 1} | {w: i + 2 for i, w in enumerate(words)}
    with open(path, "w") as f:
        json.dump(vocab, f)
    return vocab


@lc.compute
class Tokenize:
    """A word-level tokenizer, loaded from its vocabulary file once per worker."""

    def __init__(self, vocab_path):
        with open(vocab_path) as f:
            self.vocab = json.load(f)

    def __call__(self, sample_in, sample_out):
        words = re.findall(r"\w+|[^\w\s]", sample_in.text.text().lower())
        ids = [self.vocab.get(w, 1) for w in words] + [EOS]
        sample_out.tokens.append(np.array(ids, dtype=np.int32))


def main():
    texts = make_corpus(500)
    corpus = lc.from_numpy("./corpus", {"text": np.array(texts)}, overwrite=True)
    vocab = train_vocab(texts, "./vocab.json")

    out = lc.empty("./corpus-tokens", overwrite=True)
    out.create_tensor("tokens", dtype="int32")  # one 1-D sample per document; lengths vary
    first = Tokenize(vocab_path="./vocab.json").eval(corpus, out, num_workers=2, checkpoint_interval=100)
    again = Tokenize(vocab_path="./vocab.json").eval(corpus, out, num_workers=2, checkpoint_interval=100)
    # Already done: nothing ran, nothing was written (the result is the first run's; nothing was resumed).
    assert (again.version, again.inputs, again.resumed_from) == (first.version, 500, 0)
    print(f"tokenized {first.inputs} documents; the rerun did nothing (still version {again.version})")

    out.compact()  # the token stream becomes one typed zarr array (blocks read it the same either way)
    for seq_len in (16, 64):  # any sequence length, without tokenizing again
        blocks = out.tokens.blocks(seq_len)  # windows over the stream; nothing is read yet
        x, y = blocks[0]  # y: the next token of each x
        print(f"seq_len={seq_len}: {len(blocks)} blocks; first: {x[:8].tolist()} -> {y[:8].tolist()}")
    eos = 0
    for batch in blocks.batches(32, shuffle=True, seed=0):  # what a training loop would read
        assert batch["x"].shape[1:] == batch["y"].shape[1:] == (64,)
        eos += int((batch["x"] == EOS).sum())
    print(f"{blocks.num_values} tokens, vocabulary of {len(vocab)}; {eos} document ends seen in one epoch")


if __name__ == "__main__":
    main()
