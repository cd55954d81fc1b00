"""Reads the Brown corpus tarball into tagged sentences and natural (detokenized) text."""

import re
import tarfile

# Tokens written with no space before / after them when the sentence is detokenized.
_NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "''", "'"}
_NO_SPACE_AFTER = {"(", "[", "``", "`", "$"}
_DOUBLED = {";", "?", "!", ":", ",", "."}
_INSIDE_QUOTES = {".", ",", "?", "!"}


def base_tag(tag):
    """'nn-tl' -> 'nn', 'np$' -> 'np$', 'dod*' -> 'dod*' (title/headline marks dropped)."""
    for suffix in ("-tl", "-hl", "-nc", "-fw"):
        tag = tag.replace(suffix, "")
    return tag


def read_samples(tarball):
    """Yields (sample_id, category_code, [[(word, tag), ...], ...]) for each of the 500 samples."""
    with tarfile.open(tarball) as tar:
        members = sorted((m for m in tar.getmembers()
                          if re.fullmatch(r"package/c[a-r]\d\d", m.name)), key=lambda m: m.name)
        for member in members:
            text = tar.extractfile(member).read().decode("utf-8")
            sentences = []
            for line in text.split("\n"):
                line = line.strip()
                if not line:
                    continue
                tokens = []
                for item in line.split(" "):
                    word, slash, tag = item.rpartition("/")
                    if not slash or not word:
                        continue
                    tokens.append((word, base_tag(tag)))
                if tokens:
                    sentences.append(tokens)
            sample = member.name.split("/")[-1]
            yield sample, sample[:2], sentences


def normalize(tokens):
    """A Brown sentence as modern edited text would have it, or None when it is not a whole
    sentence. Brown doubles some sentence punctuation (`? ?`, `; ;`, `Jr. .`) and puts a period
    or comma after a closing quote; a model trained on that copies it and "corrects" clean input
    towards it. Sentences starting in lower case are fragments cut from longer ones."""
    out = []
    for word, tag in tokens:
        if out and word in _DOUBLED and (word == out[-1][0]
                                           or (word == "." and out[-1][0].endswith("."))):
            continue
        if out and out[-1][0] == "''" and word in _INSIDE_QUOTES:
            if len(out) < 2 or out[-2][0] != word:  # `'' ? ?` moves one `?`
                out.insert(len(out) - 1, (word, tag))
            continue
        out.append((word, tag))
    first = next((w for w, _ in out if w not in ("``", "`", "(")), "")
    if not first[:1].isupper() and not first[:1].isdigit():
        return None
    return out


def detokenize(words):
    """Brown tokens -> natural text: quotes as ", punctuation attached to the word before it."""
    out = []
    no_space = True
    for word in words:
        text = {"``": '"', "''": '"', "`": "'"}.get(word, word)
        if out and not no_space and word not in _NO_SPACE_BEFORE:
            out.append(" ")
        out.append(text)
        no_space = word in _NO_SPACE_AFTER
    return "".join(out)
