"""What the input captions themselves say about English: their vocabulary and a smoothed trigram model.

Computed by the pipeline in a first pass over the same captions it perturbs (stages/captions.py wraps
CorpusCounts in a CombineFn and hands the CorpusModel on as a side input), so the statistics follow the input
and scale with the runner; nothing is built by hand. Pure Python and numpy, no Beam.

- The vocabulary: a replacement word must be one the captions use ("sunshade", "scriptorium" never are).
- What each photo's captions name is not part of the model (it would grow with the corpus, and every worker
  holds the model whole): photo_words() gives a caption's (photo, word keys), which stages/captions.py joins
  by photo, so a replace negative never brings in a word another caption of the same photo uses ("a tub and
  toilet" -> "a sink and toilet", where another annotator wrote "sink": the negative may well be true of the
  photo).
- The trigram model: interpolated absolute discounting (Ney et al. 1994) over casefolded tokens, punctuation
  included, with sentence boundaries. It scores how plausible a caption-like text is, cheaply on a CPU.
  N-grams are stored as sorted int64 keys with int32 counts (12 bytes each), so the model of 591,753 COCO
  captions is tens of MB, pickled once to each worker, and looked up with one numpy call per batch.
"""
from __future__ import annotations

import bisect
import hashlib
import zlib
from collections import Counter
from dataclasses import dataclass

import numpy as np

from pipeline.perturb.text import TOKEN as WORD
from pipeline.perturb.text import words

BOS, EOS = "<s>", "</s>"
DISCOUNT = 0.75
MAX_VOCABULARY = 2_000_000  # (V+1)**3 < 2**63
_SEP = "\x1f"


def tokens(text: str) -> list[str]:
    """The model's tokens: casefolded words and punctuation marks (perturb/text.words)."""
    return words(text)


def is_word(token: str) -> bool:
    return any(c.isalpha() for c in token)


class CorpusCounts:
    """Mergeable n-gram counts (the CombineFn's accumulator): unigrams, bigrams and trigrams as joined strings."""

    def __init__(self):
        self.counts: Counter = Counter()
        self.captions = 0

    def add(self, caption: str) -> None:
        """Count one caption."""
        caption_tokens = tokens(caption)
        padded = [BOS, BOS, *caption_tokens, EOS]
        self.captions += 1
        c = self.counts
        for i in range(2, len(padded)):
            u, v, w = padded[i - 2], padded[i - 1], padded[i]
            c[w] += 1
            c[v + _SEP + w] += 1
            c[u + _SEP + v + _SEP + w] += 1

    def merge(self, other: CorpusCounts) -> CorpusCounts:
        self.counts.update(other.counts)
        self.captions += other.captions
        return self

    def model(self) -> CorpusModel:
        return CorpusModel.from_counts(self.counts, self.captions)


def image_key(image) -> int:
    """A photo's 32-bit digest (the same on every worker and run; Python's hash() is salted per process)."""
    return zlib.crc32(str(image).encode("utf-8", "surrogatepass"))


def photo_words(caption: str, image) -> tuple[int, tuple[int, ...]] | None:
    """(image_key, the word_keys of the words the caption names) for a caption of photo `image`; None when its
    photo is unknown. A photo's named words are the union over its captions (a join by image_key)."""
    if image is None:
        return None
    return image_key(image), tuple(sorted({word_key(w) for w in tokens(caption) if is_word(w)}))


def word_key(word: str) -> int:
    return zlib.crc32(word.casefold().encode("utf-8", "surrogatepass"))


@dataclass
class CorpusModel:
    """Vocabulary and trigram tables; ids are ranks by (count desc, word), so equal input gives equal bytes."""

    captions: int
    vocabulary: dict[str, int]   # word -> id; id len(vocabulary) is the unknown word
    unigram: np.ndarray          # id -> count (BOS excluded: it is never predicted)
    keys2: np.ndarray            # sorted bigram keys u*V+v
    count2: np.ndarray           # bigram counts
    context_keys2: np.ndarray    # sorted keys of the (u, v) that precede some word in a trigram
    context2: np.ndarray         # their count as a trigram context
    follow2: np.ndarray          # distinct words seen after them (the back-off weight)
    keys3: np.ndarray            # sorted trigram keys (u*V+v)*V+w
    count3: np.ndarray
    context1: np.ndarray         # id -> count as a bigram context
    follow1: np.ndarray          # id -> distinct words seen after it
    relations: np.ndarray | None = None  # the captions' relation digests (perturb/relations.py), when swap needs them

    @classmethod
    def from_counts(cls, counts: Counter, captions: int) -> CorpusModel:
        grams = {1: {}, 2: {}, 3: {}}
        for key, n in counts.items():
            parts = tuple(key.split(_SEP))
            grams[len(parts)][parts] = n
        unigrams = grams[1]
        unigrams.setdefault((BOS,), 0)
        # Keys are products of ids: past MAX_VOCABULARY words a trigram key would not fit in int64, so the
        # rarest words beyond it share the unknown id.
        ranked = sorted(unigrams, key=lambda p: (-unigrams[p], p[0]))[:MAX_VOCABULARY]
        vocabulary = {p[0]: i for i, p in enumerate(ranked)}
        size = len(vocabulary) + 1
        unigram = np.zeros(size, dtype=np.int64)
        for (w,), n in unigrams.items():
            unigram[vocabulary.get(w, size - 1)] += n
        unigram[vocabulary[BOS]] = 0

        def table(order: int):
            merged = Counter()
            for parts, n in grams[order].items():
                merged[_key([vocabulary.get(p, size - 1) for p in parts], size)] += n
            items = sorted(merged.items())
            keys = np.fromiter((k for k, _ in items), dtype=np.int64, count=len(items))
            values = np.fromiter((n for _, n in items), dtype=np.int64, count=len(items))
            return keys, values

        keys2, count2 = table(2)
        keys3, count3 = table(3)
        # Trigram contexts (u, v): total count and distinct followers ((BOS, BOS) is a context, not a bigram).
        context_keys2, where = np.unique(keys3 // size, return_inverse=True)
        context2 = np.bincount(where, weights=count3, minlength=len(context_keys2)).astype(np.int64)
        follow2 = np.bincount(where, minlength=len(context_keys2)).astype(np.int64)
        # Bigram contexts v: total count and distinct followers.
        context1 = np.zeros(size, dtype=np.int64)
        follow1 = np.zeros(size, dtype=np.int64)
        np.add.at(context1, keys2 // size, count2)
        np.add.at(follow1, keys2 // size, 1)
        return cls(captions, vocabulary, unigram, keys2, count2.astype(np.int32), context_keys2,
                   context2.astype(np.int32), follow2.astype(np.int32), keys3, count3.astype(np.int32), context1,
                   follow1)

    @property
    def words(self) -> int:
        """Distinct words of the captions (casefolded; punctuation and the sentence markers not counted)."""
        return sum(1 for w in self.vocabulary if w not in (BOS, EOS) and is_word(w))

    @property
    def size(self) -> int:
        return len(self.vocabulary) + 1

    @property
    def unigram_total(self) -> int:
        """Every counted word; kept (the scorer divides by it for every trigram it scores)."""
        if "_unigram_total" not in self.__dict__:
            self.__dict__["_unigram_total"] = int(self.unigram.sum())
        return self.__dict__["_unigram_total"]

    def count(self, word: str) -> int:
        """How often the captions use this word (casefolded). Answers are kept: asked of every replacement word."""
        cache = self.__dict__.setdefault("_counts", {})
        if word not in cache:
            i = self.vocabulary.get(word.casefold())
            cache[word] = int(self.unigram[i]) if i is not None else 0
        return cache[word]

    def bigram(self, a: str, b: str) -> int:
        """How often the captions have word b right after word a (casefolded). Answers are kept: the
        generators ask about the same few pairs over and over."""
        cache = self.__dict__.setdefault("_bigrams", {})
        key = (a.casefold(), b.casefold())
        if key not in cache:
            i, j = self.vocabulary.get(key[0]), self.vocabulary.get(key[1])
            cache[key] = 0 if i is None or j is None else \
                int(_lookup(self.keys2, self.count2, np.asarray([i * self.size + j], dtype=np.int64))[0])
        return cache[key]

    def __getstate__(self):
        kept_answers = ("_bigrams", "_counts", "_unigram_total", "_new_ids_cache")  # rebuilt on each worker
        return {k: v for k, v in self.__dict__.items() if k not in kept_answers}

    def fingerprint(self) -> str:
        """A digest of the model's content, recorded in reports (equal captions give equal models)."""
        h = hashlib.sha256()
        for table in (self.unigram, self.keys2, self.count2, self.keys3, self.count3):
            h.update(table.tobytes())
        if self.relations is not None:
            h.update(self.relations.tobytes())
        return h.hexdigest()[:16]

    def _ids(self, words: list[str]) -> list[int]:
        unknown = self.size - 1
        return [self.vocabulary.get(t, unknown) for t in words]

    def _padded(self, words: list[str]) -> list[int]:
        bos = self.vocabulary[BOS]
        return [bos, bos, *self._ids(words), self.vocabulary.get(EOS, self.size - 1)]

    def logprobs(self, texts: list[str]) -> list[float]:
        """Natural-log probability of each text (its tokens and the end of the sentence), one numpy pass."""
        triples, owners = [], []
        for n, text in enumerate(texts):
            padded = self._padded(tokens(text))
            triples.extend(zip(padded, padded[1:], padded[2:]))
            owners.extend([n] * (len(padded) - 2))
        totals = np.zeros(len(texts))
        if triples:
            np.add.at(totals, np.asarray(owners), self._trigram_logprobs(triples))
        return totals.tolist()

    def drops_many(self, groups: list[tuple[str, list[tuple[int, int, str]]]]) -> list[list[float]]:
        """Per (caption, changes) group, log P(caption) - log P(caption with [start, end) replaced by new) for
        each (start, end, new): the negatives' changes, scored from the trigrams they touch only (the rest of the
        two texts is the same). start and end are the changed span's character offsets and fall on word
        boundaries. One numpy pass for all the groups: a batch of captions has a few thousand changes, and a
        pass per caption cost more in numpy's call overhead than in arithmetic."""
        triples, owners, signs = [], [], []
        offsets = [0]
        for caption, changes in groups:
            self._change_triples(caption, changes, offsets[-1], triples, owners, signs)
            offsets.append(offsets[-1] + len(changes))
        totals = np.zeros(offsets[-1])
        if triples:
            np.add.at(totals, np.asarray(owners), np.asarray(signs) * self._trigram_logprobs(triples))
        flat = totals.tolist()
        return [flat[a:b] for a, b in zip(offsets, offsets[1:])]

    def _change_triples(self, caption: str, changes: list[tuple[int, int, str]], first: int, triples: list,
                        owners: list, signs: list) -> None:
        """Appends the trigrams each change touches (change n owns index first + n): the caption's, signed +1,
        and the changed text's, signed -1."""
        spans = [(m.start(), m.end()) for m in WORD.finditer(caption)]
        padded = self._padded([caption[a:b].casefold() for a, b in spans])
        starts, ends = [a for a, _ in spans], [b for _, b in spans]
        for n, (start, end, new) in enumerate(changes, start=first):
            # A change inside a word ("close-up" -> "close-down", "men's"): widen it to whole tokens.
            i = bisect.bisect_right(starts, start) - 1
            if i >= 0 and ends[i] > start and starts[i] < start:
                new, start = caption[starts[i]:start] + new, starts[i]
            j = bisect.bisect_left(ends, end)
            if j < len(spans) and starts[j] < end < ends[j]:
                new, end = new + caption[end:ends[j]], ends[j]
            p = bisect.bisect_left(starts, start)      # words before the change
            q = bisect.bisect_left(starts, end)        # words before the rest
            new_ids = self._new_ids(new)
            # The caption's trigrams that end in the changed words or in the two after them, and the negative's:
            # windows of the padded ids (padded is offset by the two BOS), three ids per trigram.
            for window, sign in ((padded[p:q + 4], 1.0), (padded[p:p + 2] + new_ids + padded[q + 2:q + 4], -1.0)):
                k = len(window) - 2
                if k > 0:
                    triples.extend(zip(window, window[1:], window[2:]))
                    owners.extend([n] * k)
                    signs.extend([sign] * k)

    def _new_ids(self, text: str) -> list[int]:
        """The ids of a replacement's tokens, kept: the same few thousand replacements recur in every batch."""
        cache = self.__dict__.setdefault("_new_ids_cache", {})
        if text not in cache:
            cache[text] = self._ids(tokens(text))
        return cache[text]

    def _trigram_logprobs(self, triples: list[tuple[int, int, int]]) -> np.ndarray:
        """log P(w | u v) for each (u, v, w) of ids: interpolated absolute discounting."""
        grid = np.asarray(triples, dtype=np.int64)
        u, v, w = grid[:, 0], grid[:, 1], grid[:, 2]
        size = self.size
        # Unigram, add-one so that an unknown word keeps some mass.
        p = (self.unigram[w] + 1) / (self.unigram_total + size)
        # Bigram, interpolated with the unigram.
        c2 = _lookup(self.keys2, self.count2, v * size + w)
        ctx1, fol1 = self.context1[v], self.follow1[v]
        p = np.where(ctx1 > 0, (np.maximum(c2 - DISCOUNT, 0) + DISCOUNT * fol1 * p) / np.maximum(ctx1, 1), p)
        # Trigram, interpolated with the bigram.
        bigram_keys = u * size + v
        contexts = _positions(self.context_keys2, bigram_keys)
        ctx2, fol2 = _take(self.context2, *contexts), _take(self.follow2, *contexts)
        c3 = _lookup(self.keys3, self.count3, bigram_keys * size + w)
        p = np.where(ctx2 > 0, (np.maximum(c3 - DISCOUNT, 0) + DISCOUNT * fol2 * p) / np.maximum(ctx2, 1), p)
        return np.log(p)


def _key(ids: list[int], size: int) -> int:
    key = 0
    for i in ids:
        key = key * size + i
    return key


def _lookup(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """values[keys == wanted] per element, 0 where the key is absent."""
    return _take(values, *_positions(keys, wanted))


def _positions(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each wanted key is in the sorted keys, and whether it is there (one search for several tables)."""
    if len(keys) == 0:
        return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
    at = np.minimum(np.searchsorted(keys, wanted), len(keys) - 1)
    return at, keys[at] == wanted


def _take(values: np.ndarray, at: np.ndarray, hit: np.ndarray) -> np.ndarray:
    if len(values) == 0:
        return np.zeros(len(at), dtype=np.int64)
    return np.where(hit, values[at], 0).astype(np.int64)
