"""Train the tiny checkpoint's SentencePiece tokenizer.

Run as its own process (`python -m app.checkpoints.tokenizer_trainer`): SentencePiece
training leaves threads behind that slow torch badly in the process that trained.
Ids follow Moshi's tokenizer: 0 unknown (also Moshi's end-of-padding), 1 BOS, 2 EOS, 3 PAD.
With `--byte-fallback`, ids 4..259 are the byte pieces <0x00>..<0xFF>, as in Moshi's real
tokenizer: the Context Spanning checkpoint uses three of them as control ids (<ret> = 4 =
<0x00>, span open = 12 = <0x08>, span close = 13 = <0x09>).
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

# A small closed vocabulary is enough for a random-weight model: the tokenizer only has to
# be a real SentencePiece model with Moshi's special ids, deterministic from a seed.
_WORDS = (  # noqa: SIM905 - one readable block of words
    "the a an and or but of to in on at for with from by about as into like through after "
    "over between out against during without before under around among is are was were be "
    "been have has had do does did say says said go goes went get make know think take see "
    "come want look use find give tell work call try ask need feel become leave put mean keep "
    "let begin seem help talk turn start show hear play run move live believe hold bring "
    "happen write provide sit stand lose pay meet include continue set learn change lead "
    "understand watch follow stop create speak read allow add spend grow open walk win offer "
    "remember love consider appear buy wait serve die send expect build stay fall cut reach "
    "kill remain suggest raise pass sell require report decide pull time year people way day "
    "man thing woman life child world school state family student group country problem hand "
    "part place case week company system program question government number night point home "
    "water room mother area money story fact month lot right study book eye job word business "
    "issue side kind head house service friend father power hour game line end member law car "
    "city community name president team minute idea kid body information back parent face "
    "others level office door health person art war history party result morning reason "
    "research girl guy moment air teacher force education capital australia canberra weather "
    "search result tool answer fact source page paris france berlin sydney today tomorrow "
    "system context span voice model speech hello yes no okay thanks please sure well good "
    "great new old big small long short high low early late important young few public bad "
    "same able one two three four five six seven eight nine ten hundred thousand first last"
).split()


def synthetic_corpus(seed: int, sentences: int = 4000) -> str:
    rng = random.Random(seed)
    lines = []
    for _ in range(sentences):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        sentence = " ".join(words).capitalize() + rng.choice([".", "?", "!", ","])
        if rng.random() < 0.1:
            sentence += f" {rng.randint(0, 9999)}"
        if rng.random() < 0.05:  # role prompts and spans come wrapped in <system> tags
            sentence = f"<system> {sentence} <system>"
        lines.append(sentence)
    return "\n".join(lines) + "\n"


def train_tokenizer(out_model: Path, vocab_size: int, seed: int,
                    byte_fallback: bool = False) -> None:
    import os

    import sentencepiece as spm

    out_model = out_model.resolve()
    out_model.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        # Relative paths: the trainer records its arguments in the model file, and a
        # temporary folder's name would make two builds from one seed differ.
        os.chdir(tmp)
        Path("corpus.txt").write_text(synthetic_corpus(seed), encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input="corpus.txt",
            model_prefix="spm",
            vocab_size=vocab_size,
            model_type="unigram",
            character_coverage=1.0,
            unk_id=0,
            bos_id=1,
            eos_id=2,
            pad_id=3,
            num_threads=1,
            seed_sentencepiece_size=100000,
            input_sentence_size=0,
            shuffle_input_sentence=False,
            minloglevel=2,
            byte_fallback=byte_fallback,
        )
        out_model.write_bytes(Path("spm.model").read_bytes())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--vocab-size", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--byte-fallback", action="store_true")
    args = parser.parse_args(argv)
    train_tokenizer(args.out, args.vocab_size, args.seed, args.byte_fallback)


if __name__ == "__main__":
    main()
