"""Rule-based hard positives (rule_replace, rule_swap) on real captions: yield, the training set they make, and
the blind reads of their rows. Prints figures.

    python benchmarks/rule_positives.py [--captions ../shared/data/coco/captions_val2017.json]
        [--output_dir /tmp/rule_positives] [--skip_run] [--words] [--sheet FILE]

1. Runs `--stage=all` with its defaults (rule positives only, replace negatives) on the whole captions file.
2. Yield: per type and together, the share of captions with a rule positive; the commonest replacements.
3. The training set: rows, and the share of rows whose c_p or c_n differs from c in length by more than 20%
   (a length a text-only model could tell them apart by).
4. The blind reads (benchmarks/judged/rule_positives_v*_reader*.jsonl): per reader and type, the share of rows
   read as fluent, meaning the same for any photo, and one minimal change (true = all three), how the reader
   judged the control rows mixed in (rule-based hard negatives of other captions: none is a hard positive), and
   how many of the rows read the current rules still write. The rows read are drawn here:
   random.Random(--sample_seed).sample(annotations, SAMPLE_SIZE), in that order the first PER_TYPE rows of each
   type, among captions no earlier read judged; --sheet writes them, shuffled with the controls and without
   their type, for a reader (round 1 read
   the rules' version 1 with seed 2026, round 2 version 2 with seed 2027, round 3 version 3 with seed 2028,
   round 4 version 4 with seed 2029, round 5 version 5 with seed 2030, round 6 version 6 with seed 2031, three
   readers; rule_positives_places_* read every row version 5's place rule adds on val2017, apart).
5. --framed: instead of the captions file, the captions that open with a photo frame ("A picture of ...", as
   clause/2 rewrites them inside the frame): every one of --captions whose opening names a whole-scene frame
   (pipeline/perturb/frames.py), and FRAMED_COPIES others given one of benchmarks/full_size.py's openings (ids
   past the originals'), so that --sheet reads the framed rows of rule_clause (rounds 10-13 read clause versions 2-5
   this way with seeds 2036-2039).
6. --words: the commonest words of the captions by part of speech, each with what the synonym table
   (pipeline/perturb/data/positive_synonyms.json) says of it: the table is built from this list.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from pipeline.sources.coco import load_captions_file  # noqa: E402

TYPES = ("rule_replace", "rule_swap", "rule_clause", "rule_converse", "rule_voice")
SAMPLE_SEED, SAMPLE_SIZE, PER_TYPE, CONTROLS = 2033, 4000, 100, 30
# The kinds of rule_converse, told apart from the rewrite: the two things of an order-free relation exchanged (the
# same words), the relation said from its second thing ("with ... it", or back), a relation turned into its converse.
CONVERSE_KINDS = ("exchange", "ground", "converse")
LABELS = ("fluent", "same_meaning", "minimal")
TARGET = 0.95
JUDGED = REPO / "benchmarks" / "judged"


FRAMED_COPIES = 3000


def framed_captions(captions: str, path: str, seed: int) -> str:
    """A COCO captions file of framed captions (point 5): the real ones, then copies of others with an opening."""
    from benchmarks.full_size import ID_STRIDE, OPENINGS, vary
    from pipeline.perturb.frames import CLOSE, SCENE_FRAMES

    source = json.loads(Path(captions).read_text(encoding="utf-8"))

    def framed(text: str) -> bool:
        opening = [w.lower().strip(",.") for w in text.split()[:6]]
        return any(w in SCENE_FRAMES for w in opening) and not set(opening) & CLOSE

    annotations = sorted(source["annotations"], key=lambda a: a["id"])
    real = [{**a, "caption": a["caption"].strip()} for a in annotations if framed(a["caption"])]
    others = random.Random(seed).sample([a for a in annotations if not framed(a["caption"])], FRAMED_COPIES)
    copies = []
    for n, a in enumerate(others):
        k = 1 + n % (len(OPENINGS) - 1)
        copies.append({"id": k * ID_STRIDE + a["id"], "image_id": k * ID_STRIDE + a["image_id"],
                       "caption": vary(a["caption"].strip(), k)})
    images = {i["id"]: i for i in source["images"]}
    used = [{**images[a["image_id"] % ID_STRIDE], "id": a["image_id"]} for a in real + copies]
    out = {"info": {"description": f"{len(real)} framed val2017 captions and {len(copies)} copies with an opening"},
           "licenses": source.get("licenses", []), "images": list({i["id"]: i for i in used}.values()),
           "annotations": real + copies}
    Path(path).write_text(json.dumps(out), encoding="utf-8")
    print(f"framed captions: {len(real):,} real, {len(copies):,} copies with an opening -> {path}")
    return path


def run_stage(captions: str, output_dir: str) -> None:
    cmd = [sys.executable, "-m", "pipeline.run", "--stage=all", f"--coco_captions={captions}",
           f"--output_dir={output_dir}", "--progress_seconds=0", "--runner=DirectRunner"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"stage failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")


def table_rows(output_dir: str, table: str) -> list[dict]:
    return [r for p in sorted(glob.glob(os.path.join(output_dir, table, "*.parquet")))
            for r in pq.read_table(p).to_pylist()]


def yield_figures(rows: list[dict], captions: int, section: dict) -> None:
    by_type = {t: {r["example_id"] for r in rows if r["positive_type"] == t} for t in TYPES}
    union = set().union(*by_type.values())
    print(f"captions: {captions:,}")
    for t in TYPES:
        print(f"  {t:<14} {len(by_type[t]):>7,} captions with a positive ({len(by_type[t]) / captions:.1%})")
    print(f"  {'any rule':<14} {len(union):>7,} captions with a positive ({len(union) / captions:.1%}; target 65%)")
    print("substitutions per type (as written / inflection aside; the largest one's share of the type's rows, "
          "target 3%):")
    for t, stats in section.get("rule_types", {}).items():
        held = stats["held_out_eval_substitution"]
        print(f"  {t:<14} {stats['distinct_substitutions']:>5,} / {stats['distinct_substitutions_any_inflection']:>5,}"
              f"  largest {stats['largest_share']:.2%}  REPLACE substitutions held out: {held['captions_with_one']:,}"
              f" captions had one, {held['captions_left_without']:,} left without a {t} positive")
    total = sum(s["distinct_substitutions"] for s in section.get("rule_types", {}).values())
    print(f"  {'all types':<14} {total:>5,} distinct substitutions (target 400)")
    pairs = Counter(r["changed_span"] for r in rows if r["positive_type"] == "rule_replace")
    print("  commonest replacements: " + ", ".join(f"{p} {n}" for p, n in pairs.most_common(20)))


def length_figures(train: list[dict]) -> None:
    def far(a: str, b: str) -> bool:
        return abs(len(b) - len(a)) > 0.2 * len(a)

    if not train:
        print("train: no rows")
        return
    n = len(train)
    positive = sum(far(r["caption"], r["hard_positive"]) for r in train)
    negative = sum(far(r["caption"], r["hard_negative"]) for r in train)
    either = sum(far(r["caption"], r["hard_positive"]) or far(r["caption"], r["hard_negative"]) for r in train)
    types = Counter(r["positive_type"] for r in train)
    print(f"train: {n:,} rows ({', '.join(f'{t} {k:,}' for t, k in sorted(types.items()))})")
    print(f"  length differs from c by more than 20%: c_p {positive:,} ({positive / n:.2%}), c_n {negative:,} "
          f"({negative / n:.2%}), either {either:,} ({either / n:.2%})")


def read_before() -> set[int]:
    """Caption ids of every row an earlier read judged: a new read is of other captions."""
    return {json.loads(line)["caption_id"] for path in JUDGED.glob("rule_positives_*_reader*.jsonl")
            for line in path.read_text(encoding="utf-8").splitlines() if line.strip()}


def converse_kind(caption: str, rewrite: str) -> str:
    """Which kind of rule_converse rewrite this is (CONVERSE_KINDS)."""
    def words(text):
        return sorted(w.lower() for w in text.replace(".", " ").split())
    if words(caption) == words(rewrite):
        return "exchange"
    said = {w.lower().strip(".,") for w in rewrite.split()} ^ {w.lower().strip(".,") for w in caption.split()}
    return "ground" if said & {"with", "it", "them", "him", "her"} else "converse"


def sample_rows(captions: str, rows: list[dict], seed: int, types=TYPES, per_type: int = PER_TYPE,
                size: int = SAMPLE_SIZE) -> list[dict]:
    """The rows to read: per type, the first `per_type` rows of the sampled captions, in sample order, leaving out
    captions an earlier read judged."""
    seen = read_before()
    annotations = [a for a in load_captions_file(captions)[1] if a.get("id") not in seen]
    order = {a["id"]: k for k, a in enumerate(random.Random(seed).sample(annotations, min(size, len(annotations))))}
    picked = []
    for t in types:
        of_type = sorted((r for r in rows if r["positive_type"] == t and r["caption_id"] in order),
                         key=lambda r: order[r["caption_id"]])
        picked += [{"positive_type": t, "generator": r["generator"], "caption_id": r["caption_id"],
                    "caption": r["caption"], "hard_positive": r["hard_positive"]} for r in of_type[:per_type]]
    return picked


def control_rows(output_dir: str, taken: set[int], seed: int) -> list[dict]:
    """Rule-based hard negatives of other captions: a reader who passes them does not read strictly."""
    negatives = [r for r in table_rows(output_dir, "train_negatives")
                 if r["negative_index"] == 0 and r["caption_id"] not in taken]
    chosen = random.Random(seed + 1).sample(negatives, CONTROLS)
    return [{"positive_type": "control_negative", "generator": r["generator"], "caption_id": r["caption_id"],
             "caption": r["caption"], "hard_positive": r["hard_negative"]} for r in chosen]


def write_sheet(path: str, rows: list[dict], seed: int) -> None:
    """What a blind reader sees: an id, the caption and the candidate, shuffled; nothing of type or rule."""
    shuffled = list(enumerate(rows))
    random.Random(seed + 2).shuffle(shuffled)
    with open(path, "w", encoding="utf-8") as f:
        for k, r in shuffled:
            f.write(json.dumps({"id": k, "caption": r["caption"], "rewrite": r["hard_positive"]},
                               ensure_ascii=False) + "\n")
    print(f"wrote {len(rows)} rows for a blind reader to {path} (ids index the judged file's rows)")


def read_table(path: Path, current: set[tuple[int, str]]) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if any(r.get(label) is None for r in rows for label in LABELS):
        print(f"{path.name}: not read yet")
        return
    read = [r for r in rows if r["positive_type"] in TYPES]
    kept = [r for r in read if (r["caption_id"], r["hard_positive"]) in current]
    kept_true = sum(all(r[label] for label in LABELS) for r in kept)
    print(f"{path.name} ({rows[0].get('reader', 'reader')}; {', '.join(sorted({r['generator'] for r in read}))}; "
          f"the current rules still write {len(kept)} of its {len(read)} rows, {kept_true} of them read true):")
    print(f"  {'type':<17} {'rows':>5} {'fluent':>7} {'same':>7} {'minimal':>8} {'true':>7}")
    kinds = [f"rule_converse:{k}" for k in CONVERSE_KINDS]
    for t in (*TYPES, *kinds, "control_negative"):
        of_type = [r for r in rows if r["positive_type"] == t or (
            t in kinds and r["positive_type"] == "rule_converse" and
            f"rule_converse:{converse_kind(r['caption'], r['hard_positive'])}" == t)]
        if not of_type:
            continue
        shares = [sum(r[label] for r in of_type) / len(of_type) for label in LABELS]
        true = sum(all(r[label] for label in LABELS) for r in of_type) / len(of_type)
        mark = "" if t == "control_negative" else ("  (target 95%)" if true >= TARGET else "  (BELOW the 95% target)")
        print(f"  {t:<17} {len(of_type):>5} " + " ".join(f"{s:>7.0%}" for s in shares) + f" {true:>7.0%}{mark}")


def words_table(captions: str) -> None:
    """The commonest words by coarse part of speech, with the synonym table's decision for each."""
    from pipeline.perturb.generators import PARSER, TAGGER, spacy_pipeline
    from pipeline.perturb.rule_data import positive_synonyms

    table = positive_synonyms()
    kept = {e["from"].lower(): e["to"] for e in table.entries}
    raw = json.loads((REPO / "pipeline/perturb/data/positive_synonyms.json").read_text(encoding="utf-8"))
    considered = {w.strip().split(" ")[0] for c in raw["considered"] for w in c["words"].replace("/", ",").split(",")}
    nlp = spacy_pipeline({TAGGER, PARSER})
    texts = [a["caption"] for a in load_captions_file(captions)[1] if isinstance(a.get("caption"), str)]
    counts: dict[str, Counter] = {}
    for doc in nlp.pipe(texts, batch_size=256):
        for word, part in {(t.lower_, t.tag_[:2]) for t in doc}:
            counts.setdefault(part, Counter())[word] += 1
    for part in ("NN", "JJ", "VB", "IN", "RB"):
        print(f"{part}: " + ", ".join(
            f"{w} {n} [{'-> ' + kept[w] if w in kept else 'out' if w in considered else '?'}]"
            for w, n in counts.get(part, Counter()).most_common(60)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--captions", default=str(REPO.parent / "shared/data/coco/captions_val2017.json"))
    parser.add_argument("--output_dir", default="/tmp/rule_positives")
    parser.add_argument("--skip_run", action="store_true", help="read an earlier run in --output_dir")
    parser.add_argument("--words", action="store_true", help="print the commonest words and the table's decisions")
    parser.add_argument("--sheet", default=None, help="write the sample and controls, shuffled, for a blind reader")
    parser.add_argument("--sample_seed", type=int, default=SAMPLE_SEED, help="the sample of captions to read")
    parser.add_argument("--types", default=",".join(TYPES), help="--sheet: the rule types to read")
    parser.add_argument("--per_type", type=int, default=PER_TYPE, help="--sheet: rows per type")
    parser.add_argument("--framed", action="store_true",
                        help="run on the captions that open with a photo frame (point 5) instead")
    parser.add_argument("--every_exchange", action="store_true",
                        help="--sheet: also every rule_converse exchange of the captions no read judged (they are "
                             "few: a random sample holds too few to read)")
    args = parser.parse_args()
    if args.framed:
        os.makedirs(args.output_dir, exist_ok=True)
        path = os.path.join(args.output_dir, "framed_captions.json")
        args.captions = path if args.skip_run else framed_captions(args.captions, path, args.sample_seed)
    if not args.skip_run:
        run_stage(args.captions, args.output_dir)
    positives = table_rows(args.output_dir, "hard_positives")
    captions = json.loads(Path(args.output_dir, "report.json").read_text())["tables"]["train"]["read"]
    yield_figures(positives, captions,
                  json.loads(Path(args.output_dir, "report.json").read_text())["tables"]["hard_positives"])
    length_figures(table_rows(args.output_dir, "train"))
    if args.sheet:
        types = tuple(args.types.split(","))
        sample = sample_rows(args.captions, positives, args.sample_seed, types, args.per_type)
        if args.every_exchange:
            taken, seen = {r["caption_id"] for r in sample}, read_before()
            sample += [{"positive_type": "rule_converse", "generator": r["generator"], "caption_id": r["caption_id"],
                        "caption": r["caption"], "hard_positive": r["hard_positive"]} for r in positives
                       if r["positive_type"] == "rule_converse" and r["caption_id"] not in taken | seen and
                       converse_kind(r["caption"], r["hard_positive"]) == "exchange"]
        rows = sample + control_rows(args.output_dir, {r["caption_id"] for r in sample}, args.sample_seed)
        write_sheet(args.sheet, rows, args.sample_seed)
        with open(args.sheet + ".key.jsonl", "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    current = {(r["caption_id"], r["hard_positive"]) for r in positives}
    for path in sorted(JUDGED.glob("rule_positives_*_reader*.jsonl")):
        read_table(path, current)
    if args.words:
        words_table(args.captions)


if __name__ == "__main__":
    main()
