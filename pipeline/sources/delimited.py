"""CSV and TSV caption files, read by rules written here rather than by Python's csv module: a stray quote made
that module read on to the next quote, merging the records between into one caption (a TSV caption beginning with
"), a field over 131,072 characters ended the file there, and a row with more fields than the header put the rest
under a None key. The rules decide every line alone, so one bad line never costs another:

- a record is one line (LF, a CR before it dropped), read through files.bounded_lines: past --max_record_bytes
  it is rejected unread (record_too_large); a blank line is no record; a UTF-8 BOM before the header is dropped;
  a CR anywhere else in a line is a line break of CR alone (old Mac files), which would merge the records it
  separates into one: that line is cr_line_break (a header line with one is refused before any work);
- CSV (`,`): a field either holds no quote, or begins with one and ends with the quote just before the next comma
  or the line's end, a doubled quote inside standing for one. Anything else (a quote inside an unquoted field, text
  after a closing quote, a quote that does not close on its line, as a caption with a line break has) is
  bad_quotes: Python's guesses at such lines were what merged records;
- TSV (`\\t`, IANA's text/tab-separated-values, as CC3M's files are): no quoting, a quote is text; but a field
  that begins with one may be text or a quoted field written by a CSV writer, so its record is ambiguous_quote,
  never guessed;
- a record has exactly as many fields as the header (else wrong_field_count: an unquoted comma in a caption cut
  it, and its tail was stored as the image); the header's own line parses, and the columns read are named once
  in it (the launcher checks: pipeline/sources/corpus.py).
"""
from __future__ import annotations

from pipeline.perturb.outcomes import Reject

CSV, TSV = ",", "\t"


def delimiter_of(path: str) -> str:
    return TSV if path.lower().endswith(".tsv") else CSV


def split_line(line: str, delimiter: str) -> list[str]:
    """The fields of one line by the rules above; Reject (bad_quotes, ambiguous_quote) where they do not hold."""
    if delimiter == TSV:
        fields = line.split(TSV)
        quoted = next((i for i, field in enumerate(fields) if field.startswith('"')), None)
        if quoted is not None:
            raise Reject("ambiguous_quote", f"field {quoted + 1} begins with a quote: in a TSV file that is text, "
                                            f"or a quoted field a CSV writer made; not guessed")
        return fields
    return _split_csv(line)


def _split_csv(line: str) -> list[str]:
    fields, i, n = [], 0, len(line)
    while True:
        number = len(fields) + 1
        if i < n and line[i] == '"':
            parts, j = [], i + 1
            while True:
                k = line.find('"', j)
                if k < 0:
                    raise Reject("bad_quotes", f"field {number}: its quote does not close on its line (a record is "
                                               f"one line)")
                parts.append(line[j:k])
                if line.startswith('"', k + 1):  # a doubled quote: one quote of the text
                    parts.append('"')
                    j = k + 2
                    continue
                break
            fields.append("".join(parts))
            i = k + 1
            if i == n:
                return fields
            if line[i] != CSV:
                raise Reject("bad_quotes", f"field {number}: text after its closing quote")
            i += 1
        else:
            k = line.find(CSV, i)
            field = line[i:] if k < 0 else line[i:k]
            if '"' in field:
                raise Reject("bad_quotes", f"field {number}: a quote inside a field that does not begin with one")
            fields.append(field)
            if k < 0:
                return fields
            i = k + 1


def record_of(header: list[str], line: str, delimiter: str) -> dict:
    """The record of one line, its fields by the header's names; Reject where the line breaks the rules."""
    if "\r" in line:
        raise Reject("cr_line_break", f"the line holds {line.count(chr(13)):,} CR not followed by LF (old Mac line "
                                      f"breaks): the records they separate would be one; write the file with LF or "
                                      f"CRLF")
    fields = split_line(line, delimiter)
    if len(fields) != len(header):
        raise Reject("wrong_field_count", f"{len(fields)} fields, the header has {len(header)} (an unquoted "
                                          f"{'comma' if delimiter == CSV else 'tab'} inside a field?)")
    return dict(zip(header, fields, strict=True))
