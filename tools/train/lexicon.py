"""The lexicon gecd's spelling stage reads (`spelling.lexicon`, src/spelling/spell_corrector.h)."""

import collections
import re

_PLAIN_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def counts(sentences):
    """{word: count} for every plain word (letters, at most one inner apostrophe) of tagged
    `sentences`, lower-cased; the count is how often it was written in lower case. The spelling
    stage keeps every listed word as written and takes corrections only among the frequent
    ones, so a name ("Lester", count 0) is never the fix of a typo ("leter")."""
    out = collections.Counter()
    for s in sentences:
        for w, _ in s:
            if _PLAIN_WORD.fullmatch(w.lower()):
                out[w.lower()] += 1 if w == w.lower() else 0
    return out


def write(sentences, path):
    """Writes word<TAB>count lines, most frequent first; returns how many words."""
    c = counts(sentences)
    with open(path, "w") as f:
        for word, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])):
            f.write(f"{word}\t{n}\n")
    return len(c)
