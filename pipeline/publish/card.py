"""The dataset card (README.md) of a published folder: YAML metadata the Hub and `datasets` read (configs,
features, row counts), then what a researcher needs: the tables, how to load them, per-type counts, how they
were made (reports, generators, prompts, model), licenses and citations. Nothing time-dependent goes in, so
the same tables always give the same card.
"""
from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
import yaml

from pipeline.io.report import REPORT_FILE, read_own_file, separability_line
from pipeline.tables.folders import Table
from pipeline.tables.shards import VERIFY_PAGES, read_table

PAPER = "https://arxiv.org/abs/2409.17958"
# Columns whose values are worth counting in the card (per table, when present).
COUNT_COLUMNS = ("subset", "category", "negative_type", "positive_type", "generator", "negative_generator",
                 "positive_generator", "model", "positive_model")
_DTYPES = {pa.string(): "string", pa.large_string(): "string", pa.int64(): "int64", pa.int32(): "int32",
           pa.float64(): "float64", pa.bool_(): "bool"}

CITATIONS = {
    "kamath2024": """@inproceedings{kamath2024hard,
  title     = {The Hard Positive Truth about Vision-Language Compositionality},
  author    = {Kamath, Amita and Hsieh, Cheng-Yu and Chang, Kai-Wei and Krishna, Ranjay},
  booktitle = {European Conference on Computer Vision (ECCV)},
  year      = {2024}
}""",
    "coco": """@inproceedings{lin2014microsoft,
  title     = {Microsoft {COCO}: Common Objects in Context},
  author    = {Lin, Tsung-Yi and Maire, Michael and Belongie, Serge and Hays, James and Perona, Pietro and
               Ramanan, Deva and Doll{\\'a}r, Piotr and Zitnick, C. Lawrence},
  booktitle = {European Conference on Computer Vision (ECCV)},
  year      = {2014}
}""",
    "visual_genome": """@article{krishna2017visual,
  title   = {Visual Genome: Connecting Language and Vision Using Crowdsourced Dense Image Annotations},
  author  = {Krishna, Ranjay and Zhu, Yuke and Groth, Oliver and Johnson, Justin and Hata, Kenji and
             Kravitz, Joshua and Chen, Stephanie and Kalantidis, Yannis and Li, Li-Jia and Shamma, David A. and
             Bernstein, Michael S. and Fei-Fei, Li},
  journal = {International Journal of Computer Vision},
  volume  = {123},
  pages   = {32--73},
  year    = {2017}
}""",
    "vl_checklist": """@article{zhao2022vlchecklist,
  title   = {{VL-CheckList}: Evaluating Pre-trained Vision-Language Models with Objects, Attributes and Relations},
  author  = {Zhao, Tiancheng and Zhang, Tianqi and Zhu, Mingwei and Shen, Haozhan and Lee, Kyusong and
             Lu, Xiaopeng and Yin, Jianwei},
  journal = {arXiv preprint arXiv:2207.00221},
  year    = {2022}
}""",
    "aro": """@inproceedings{yuksekgonul2023when,
  title     = {When and Why Vision-Language Models Behave like Bags-Of-Words, and What to Do About It?},
  author    = {Yuksekgonul, Mert and Bianchi, Federico and Kalluri, Pratyusha and Jurafsky, Dan and Zou, James},
  booktitle = {International Conference on Learning Representations (ICLR)},
  year      = {2023}
}""",
    "crepe": """@inproceedings{ma2023crepe,
  title     = {{CREPE}: Can Vision-Language Foundation Models Reason Compositionally?},
  author    = {Ma, Zixian and Hong, Jerry and Gul, Mustafa Omer and Gandhi, Mona and Gao, Irena and
               Krishna, Ranjay},
  booktitle = {IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)},
  year      = {2023}
}""",
    "sugarcrepe": """@inproceedings{hsieh2023sugarcrepe,
  title     = {{SugarCrepe}: Fixing Hackable Benchmarks for Vision-Language Compositionality},
  author    = {Hsieh, Cheng-Yu and Zhang, Jieyu and Ma, Zixian and Kembhavi, Aniruddha and Krishna, Ranjay},
  booktitle = {Advances in Neural Information Processing Systems (NeurIPS), Datasets and Benchmarks Track},
  year      = {2023}
}""",
    "wordnet": """@article{miller1995wordnet,
  title   = {{WordNet}: A Lexical Database for {English}},
  author  = {Miller, George A.},
  journal = {Communications of the ACM},
  volume  = {38},
  number  = {11},
  pages   = {39--41},
  year    = {1995}
}""",
    "llama2": """@article{touvron2023llama,
  title   = {Llama 2: Open Foundation and Fine-Tuned Chat Models},
  author  = {Touvron, Hugo and Martin, Louis and Stone, Kevin and others},
  journal = {arXiv preprint arXiv:2307.09288},
  year    = {2023}
}""",
}

# What each config is built from: which sources (citations, licenses) it involves.
SOURCES = {
    "replace_eval": ("visual_genome", "vl_checklist"),
    "swap_eval": ("visual_genome", "aro"),
    "order_eval": ("coco", "aro"),
    "train_negatives": ("coco", "crepe", "sugarcrepe", "wordnet"),
    "hard_positives": ("coco", "llm"),
    "llm_negatives": ("coco", "sugarcrepe", "llm"),
    "train": ("coco", "crepe", "sugarcrepe", "wordnet", "llm"),
}
LICENSES = {
    "coco": "COCO captions and image records: the annotations are © the COCO Consortium under "
            "[CC BY 4.0](https://creativecommons.org/licenses/by/4.0/) (cocodataset.org terms of use). The images "
            "are not in this dataset; `image_url` points to them, and they keep their Flickr licenses.",
    "visual_genome": "Visual Genome: [CC BY 4.0](https://creativecommons.org/licenses/by/4.0/) "
                     "(visualgenome.org). Images are referenced by path, not included.",
    "vl_checklist": "VL-CheckList annotations (the REPLACE captions and hard negatives): as stated by the "
                    "VL-CheckList repository (github.com/om-ai-lab/VL-CheckList). **Unknown here**: we found no "
                    "license for the annotation files themselves; check it before redistributing.",
    "aro": "ARO (VG-Attribution captions, boxes; the COCO-Order perturbations follow its method): as stated by "
           "the ARO repository (github.com/mertyg/vision-language-models-are-bows). **Unknown here**: the "
           "license of the annotation files was not confirmed.",
    "wordnet": "WordNet 3.0 (used to choose replacement words): the WordNet license (Princeton University), "
               "which allows use and redistribution with its notice.",
    "llm": "LLM hard positives: text written by the model named in the provenance below. For Llama 2 models the "
           "Llama 2 Community License and Acceptable Use Policy apply to these outputs, including its clause on "
           "using outputs to improve other large language models.",
}


def _feature(field: pa.Field) -> dict:
    if field.type in _DTYPES:
        return {"name": field.name, "dtype": _DTYPES[field.type]}
    if pa.types.is_list(field.type) and field.type.value_type in _DTYPES:
        # `sequence:` is read by every `datasets` version (4.x and later turn it into a List feature).
        return {"name": field.name, "sequence": _DTYPES[field.type.value_type]}
    raise ValueError(f"column {field.name}: no card type for {field.type}")


def _size_category(rows: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                        (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M")):
        if rows < limit:
            return name
    return "10M<n<100M"


def _dataset_info(t: Table, num_bytes: int) -> dict:
    return {
        "config_name": t.config,
        "features": [_feature(f) for f in t.schema],
        "splits": [{"name": t.split, "num_bytes": num_bytes, "num_examples": t.rows}],
        "download_size": t.download_size,
        "dataset_size": num_bytes,
    }


def metadata(tables: list[Table]) -> dict:
    """The card's YAML: what the Hub and `datasets.load_dataset` read."""
    return {
        "pretty_name": "Hard positives and hard negatives for vision-language compositionality (hardpos)",
        "language": ["en"],
        "license": "other",
        "license_name": "mixed-sources",
        "task_categories": ["zero-shot-image-classification"],
        "tags": ["compositionality", "hard-negatives", "hard-positives", "image-text-matching", "clip",
                 "vision-language"],
        "size_categories": [_size_category(sum(t.rows for t in tables))],
        # fragment_scan_options: a builder parameter of `datasets`' Parquet loader (4.2 and later), so that
        # load_dataset checks every page's checksum and a damaged shard is an error, not other values.
        "configs": [{"config_name": t.config,
                     "data_files": [{"split": t.split, "path": t.data_files_pattern()}],
                     "fragment_scan_options": dict(VERIFY_PAGES)} for t in tables],
        "dataset_info": [_dataset_info(t, t.arrow_bytes()) for t in tables],
    }


def value_counts(table: Table) -> dict[str, Counter]:
    """Rows per value of the COUNT_COLUMNS the table has, read from its shards."""
    columns = [c for c in COUNT_COLUMNS if c in table.schema.names]
    counts = {c: Counter() for c in columns}
    for path in table.files:
        data = read_table(path, columns=columns)
        for c in columns:
            counts[c].update(v for v in data.column(c).to_pylist() if v is not None)
    return {c: n for c, n in counts.items() if n}


def _md_counts(counter: Counter, limit: int = 25) -> str:
    items = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    shown = ", ".join(f"{v} {n:,}" for v, n in items[:limit])
    return shown + (f", … ({len(items) - limit} more)" if len(items) > limit else "")


def _separability(section: dict) -> list[str]:
    """The train table's shortcut figures (report.json's separability section) and what they mean."""
    classifier = section["classifier"]
    by_type = ", ".join(f"{t} {f['accuracy']:.1%}" for t, f in section["p_vs_n"]["by_positive_type"].items()
                        if f["accuracy"] is not None)
    return [f"- text-only separability ({section['p_vs_n']['pairs']:,} rows): {separability_line(section)}"
            + (f"; P vs N per `positive_type`: {by_type}" if by_type else ""),
            f"  - A bag-of-words naive Bayes that never sees the image ({classifier['folds']} folds by image, seed "
            f"{classifier['seed']}) picks c_p out of (c_p, c_n) (P vs N), c_p out of (c, c_p) (C vs P) and c_n out "
            "of (c, c_n) (C vs N). Chance is 50%: a high P vs N means a model can tell the positive from the "
            "negative without the image, a shortcut that training on this table can teach in place of looking."]


def _rule_diversity(section: dict) -> list[str]:
    """Per rule type: how many substitutions its rows use and the largest share of one; what was held out of the
    REPLACE evaluation set's substitutions, and why the SWAP set is not so."""
    lines = []
    for kind, stats in section["rule_types"].items():
        top = ", ".join(f"{s} {share:.1%}" for s, _, share in stats.get("commonest_substitutions", [])[:3])
        lines.append(f"- `{kind}`: {stats['rows']:,} rows using {stats.get('distinct_substitutions', 0):,} distinct "
                     f"substitutions ({stats.get('distinct_substitutions_any_inflection', 0):,} inflection aside); "
                     f"the largest is {stats.get('largest_share', 0):.1%} of the rows ({top})")
    held = section.get("eval_substitutions_held_out")
    if held is not None:
        left = sum(s.get("held_out_eval_substitution", {}).get("captions_left_without", 0)
                   for s in section["rule_types"].values())
        lines.append(
            "- REPLACE evaluation set: " + (
                f"its {len(held)} substitutions (c -> c_p of `replace_eval`, either direction, any inflection) were "
                f"held out of the rule positives; {left:,} caption(s) had only such a candidate and got no rule "
                f"positive for it. Held out: {', '.join(held)}."
                if held else "its substitutions were **allowed** in the rule positives "
                "(`--allow_eval_substitutions`): a model finetuned on this table may gain on REPLACE from the "
                "word list itself; report REPLACE's held-out view."))
        lines.append("- SWAP evaluation set: `rule_swap` exchanges the two sides of an \"and\", the same operation as "
                     "the SWAP set's hard positives, by design (as in the paper's swap-only runs); a SWAP score of a "
                     "model finetuned on these rows measures that operation learned, not one held out.")
    return lines


def _description(table: Table) -> str:
    meta = table.schema.metadata or {}
    from pipeline.io.schema import load_schema

    try:
        return load_schema(meta.get(b"hardpos.table", b"").decode()).description
    except (OSError, ValueError):
        return ""


def _mapping(value) -> dict:
    """A report's section as read: a report edited or written by another version may hold anything there."""
    return value if isinstance(value, dict) else {}


def _input_names(value) -> str:
    """An input flag's value as the card names it: the file names of a path or of each pattern of a list
    (--captions is repeatable), never the folders above them, which are the maker's machine's."""
    values = value if isinstance(value, list) else [value]
    return ",".join(str(v).replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] for v in values)


def _provenance(tables: list[Table]) -> list[str]:
    lines = []
    seen = set()
    for t in tables:
        report = t.stage_report
        run = (str(t.run_dir), report.get("stage"))
        if run in seen:
            continue
        seen.add(run)
        names = ", ".join(x.config for x in tables
                          if x.run_dir == t.run_dir and x.stage_report.get("stage") == report.get("stage"))
        inputs = ", ".join(f"{k}={_input_names(v)}" for k, v in sorted(_mapping(report.get("inputs")).items()))
        lines.append(f"- `--stage={report.get('stage')}` wrote {names}; inputs: {inputs or '(none recorded)'}")
        for name, section in report.get("tables", {}).items():
            extras = []
            if "replace_table_sha256" in section:
                extras.append(f"replacement table sha256 `{section['replace_table_sha256']}`")
            if "seed" in section:
                extras.append(f"seed {section['seed']}")
            if "negatives_per_caption" in section:
                extras.append(f"{section['negatives_per_caption']} negative(s) per caption and type")
            if "model" in section:
                sampling = section.get("sampling", {})
                extras.append(f"model `{section['model']}` via `{section.get('llm_engine')}`, chat format "
                              f"`{section.get('chat_format')}`, temperature {sampling.get('temperature')}, top_p "
                              f"{sampling.get('top_p')}, max new tokens {sampling.get('max_new_tokens')}, retries "
                              f"{sampling.get('llm_retries')}, validation `{section.get('positive_checks')}`")
            if extras:
                lines.append(f"  - {name}: " + "; ".join(extras))
    return lines


def _prompts(tables: list[Table]) -> list[str]:
    from pipeline.llm.prompts import LLM_NEGATIVE_TYPES, POSITIVE_TYPES, load_prompt

    out = []
    for t in tables:
        section = t.stage_report.get("tables", {}).get(t.config)
        if t.config not in ("hard_positives", "llm_negatives") or not section:
            continue
        prompt_set = section.get("prompt_set", "paper")
        for kind, sha in sorted(section.get("prompt_sha256", {}).items()):
            known = kind in POSITIVE_TYPES or kind in LLM_NEGATIVE_TYPES
            current = load_prompt(kind, prompt_set) if known else None
            out.append(f"<details><summary>prompt <code>{kind}</code> (sha256 {sha[:16]}…)</summary>\n")
            if current and current.sha256 == sha:
                out += ["```text", current.template.rstrip("\n"), "```"]
            else:
                out.append("The template with this sha256 is not the one in this checkout of hardpos.")
            out.append("</details>\n")
    return out


def _built_with(tables: list[Table]) -> str:
    """The hardpos version and git commit that wrote each table (from its run's report.json) and that published
    them."""
    from pipeline.provenance import build_info

    def name(info: dict | None) -> str:
        if not info:
            return "a hardpos that recorded no version"
        return f"hardpos {info.get('version') or '(version unknown)'} ({info.get('git_commit') or 'commit unknown'})"

    writers: dict[str, list[str]] = {}
    for t in tables:
        try:
            info = json.loads(read_own_file(str(t.run_dir / REPORT_FILE))).get("hardpos")
        except (OSError, ValueError, RecursionError, AttributeError):
            info = None
        info = info if isinstance(info, dict) else None
        writers.setdefault(name(info), []).append(f"`{t.config}`")
    made = "; ".join(f"{', '.join(configs)} by {writer}" for writer, configs in writers.items())
    return f"{made}; published by {name(build_info())}"


def render(tables: list[Table], repo_id: str) -> str:
    """The full README.md."""
    header = yaml.safe_dump(metadata(tables), sort_keys=False, allow_unicode=True, width=1000)
    configs = {t.config for t in tables}
    sources = sorted({s for c in configs for s in SOURCES.get(c, ())})
    lines = [
        "---", header.rstrip("\n"), "---", "",
        "# hardpos: hard positives and hard negatives for vision-language compositionality", "",
        "Evaluation and training tables from the pipeline behind *The Hard Positive Truth about Vision-Language "
        f"Compositionality* (Kamath et al., ECCV 2024, [paper]({PAPER})). Every caption c comes with a **hard "
        "negative** c_n (a minimal change that no longer matches the image) and/or a **hard positive** c_p (a "
        "minimal change that keeps the meaning). A model that is truly compositional scores "
        "s(c_p|i) > s(c_n|i) as well as s(c|i) > s(c_n|i); one that is only hard-negative-tuned often does not.",
        "", "## Configs", "",
        "| config | split | rows | files | what |", "|---|---|---:|---:|---|",
    ]
    lines += [f"| `{t.config}` | {t.split} | {t.rows:,} | {len(t.files)} | {_description(t)} |" for t in tables]
    first = tables[0]
    lines += [
        "", "## Loading", "", "```python", "import datasets",
        f'ds = datasets.load_dataset("{repo_id}", "{first.config}", split="{first.split}")',
        "```",
        "Any config above works the same way. With hardpos installed (its train extra is enough, no Beam), "
        f"`pipeline.tables.load.load_table(\"{repo_id}\", \"{first.config}\")` reads a Hub repository, a "
        "downloaded copy of it, or a run's output folder alike.", "",
        "Every shard is written with Parquet page checksums, and each config asks `datasets` (4.2 or later) to check "
        "them as it reads (`fragment_scan_options` above): a damaged shard is an error, not other values. Readers "
        "that open the files directly check nothing unless asked (pyarrow and pandas: "
        "`page_checksum_verification=True`).", "",
        "## Counts", "",
    ]
    for t in tables:
        section = t.section
        lines.append(f"**{t.config}**: {t.rows:,} rows from {section.get('read', 0):,} records read; "
                     f"{section.get('discarded', 0):,} discarded (no valid pair), {section.get('rejected', 0):,} "
                     f"rejected (malformed or failed).")
        for column, counter in value_counts(t).items():
            lines.append(f"- rows per `{column}`: {_md_counts(counter)}")
        for kind in ("discard_reasons", "reject_reasons"):
            if section.get(kind):
                lines.append(f"- {kind.replace('_', ' ')}: {_md_counts(Counter(section[kind]))}")
        if isinstance(section.get("positive_types"), dict):
            per_type = ", ".join(f"{k} {v['accepted']:,} accepted of {v['prompts']:,} prompts"
                                 for k, v in section["positive_types"].items())
            lines.append(f"- LLM answers: {per_type}")
        if section.get("separability"):
            lines += _separability(section["separability"])
        if section.get("rule_types"):
            lines += _rule_diversity(section)
        lines.append("")
    lines += ["## Columns", ""]
    for t in tables:
        lines += [f"<details><summary><code>{t.config}</code></summary>\n", "| column | type | description |",
                  "|---|---|---|"]
        for field in t.schema:
            description = (field.metadata or {}).get(b"description", b"").decode().replace("|", "\\|")
            lines.append(f"| `{field.name}` | {field.type} | {description} |")
        lines.append("\n</details>\n")
    lines += ["## How it was made", "",
              f"Built with hardpos (Apache Beam): {_built_with(tables)}. Each row's `example_id` is a hash of its "
              "source and record key; same inputs and seed give byte-identical files. Every record read is a row, a "
              "discarded dead letter or a rejected one, with its reason (counts above).", ""]
    lines += _provenance(tables)
    lines += [""] + _prompts(tables)
    lines += ["## Licenses", "",
              "The tables combine the sources below; each table is subject to the terms of the sources it is built "
              "from (see *Configs*), hence `license: other`. hardpos itself is Apache-2.0.", ""]
    lines += [f"- {LICENSES[s]}" for s in sources if s in LICENSES]
    cited = ["kamath2024"] + [s for s in sources if s in CITATIONS]
    if "llm" in sources and any("llama" in str(t.section.get("model", "")).lower() for t in tables):
        cited.append("llama2")
    lines += ["", "## Citation", "", "```bibtex", "\n\n".join(CITATIONS[c] for c in cited), "```", ""]
    return "\n".join(lines)
