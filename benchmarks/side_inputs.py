"""What every worker of train_negatives receives whole: the statistics side input (perturb/corpus.CorpusModel, with
the swap relations), by corpus size, and what the per-photo word table it no longer holds would weigh.

    .venv/bin/python benchmarks/side_inputs.py [--sizes 25014,100000,591753,3318333] [--relations-up-to 100000]
        [--real-subsets 5000,10000,25014]

1. Corpora as benchmarks/full_size.py builds them (val2017's captions copied with fresh ids and a varied text), and
   real prefixes of val2017 (--real-subsets: the growth a real corpus's vocabulary gives, which copies do not).
2. Per size: the pickled model's bytes (what Beam hands each worker), split into its n-gram tables and the relation
   table (swap; parsing is the cost, so only up to --relations-up-to captions), and the bytes the per-photo word
   keys took inside the model before the join by photo (8 bytes per distinct (photo, word) pair).
3. Prints a table, and the growth per 100,000 captions between the smallest and the largest size.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.full_size import VAL2017, build_captions  # noqa: E402
from pipeline.perturb.corpus import CorpusCounts, photo_words  # noqa: E402

MB = 2 ** 20


def figures(annotations: list[dict], relations: bool) -> dict:
    started = time.process_time()
    counts = CorpusCounts()
    pairs = set()
    for a in annotations:
        counts.add(a["caption"])
        image, words = photo_words(a["caption"], a["image_id"])
        pairs.update((image << 32) | w for w in words)
    model = counts.model()
    out = {"captions": len(annotations), "words": len(model.vocabulary) - 3, "trigrams": len(model.keys3),
           "ngram_model_mb": round(len(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)) / MB, 2),
           "photo_word_table_mb": round(8 * len(pairs) / MB, 2)}
    if relations:
        from pipeline.perturb.generators import Generators, load_spacy
        from pipeline.perturb.relations import RelationCounts, caption_keys

        nlp, lexicon = load_spacy(["swap"], None), Generators.load(["swap"]).lexicon
        found = RelationCounts()
        for doc in nlp.pipe((a["caption"] for a in annotations), batch_size=256):
            found.add(caption_keys(doc, lexicon))
        table = found.table()
        out["relations"] = len(table)
        out["relation_table_mb"] = round(table.nbytes / MB, 2)
        model.relations = table
        out["side_input_mb"] = round(len(pickle.dumps(model, protocol=pickle.HIGHEST_PROTOCOL)) / MB, 2)
    out["cpu_s"] = round(time.process_time() - started, 1)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="25014,100000,591753,3318333")
    parser.add_argument("--relations-up-to", type=int, default=100_000)
    parser.add_argument("--real-subsets", default="5000,10000,25014")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    source = json.loads(VAL2017.read_text())
    rows = []
    real = sorted(source["annotations"], key=lambda a: a["id"])
    for n in (int(s) for s in args.real_subsets.split(",") if s):
        rows.append({"corpus": "val2017 prefix", **figures(real[:n], n <= args.relations_up_to)})
        print(rows[-1], flush=True)
    for n in (int(s) for s in args.sizes.split(",") if s):
        annotations = build_captions(source, n)["annotations"]
        rows.append({"corpus": "val2017 copies", **figures(annotations, n <= args.relations_up_to)})
        print(rows[-1], flush=True)
        del annotations
    print(f"\n{'corpus':<16}{'captions':>11}{'words':>9}{'trigrams':>11}{'n-grams MB':>12}{'relations':>11}"
          f"{'side input MB':>15}{'photo words MB (before)':>25}")
    for r in rows:
        print(f"{r['corpus']:<16}{r['captions']:>11,}{r['words']:>9,}{r['trigrams']:>11,}{r['ngram_model_mb']:>12}"
              f"{r.get('relations', '-'):>11}{r.get('side_input_mb', '-'):>15}{r['photo_word_table_mb']:>25}")
    for kind in ("val2017 prefix", "val2017 copies"):
        mine = [r for r in rows if r["corpus"] == kind]
        if len(mine) > 1:
            a, b = mine[0], mine[-1]
            per = 100_000 / (b["captions"] - a["captions"])
            print(f"{kind}: per 100,000 captions, n-gram model {per * (b['ngram_model_mb'] - a['ngram_model_mb']):+.2f}"
                  f" MB, trigrams {per * (b['trigrams'] - a['trigrams']):+,.0f}, photo words (before) "
                  f"{per * (b['photo_word_table_mb'] - a['photo_word_table_mb']):+.2f} MB")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
