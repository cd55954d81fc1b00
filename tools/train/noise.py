"""Synthetic grammatical errors injected into clean tagged sentences.

Each injector takes a mutable token list [[word, tag], ...] and a random.Random, changes it in
place and returns True, or returns False when the sentence offers no place for that error. Word
forms are checked against the forms seen in the corpus (Lexicon) so that most errors produce
real words, as learners' errors usually do.
"""

import collections

ERROR_TYPES = ("article", "agreement", "verb_form", "preposition", "noun_number", "spelling",
               "capitalization", "punctuation", "word_order", "missing_word", "extra_word")

# How often each type is drawn for a noisy training pair. Spelling dominates learner text.
TYPE_WEIGHTS = {"article": 10, "agreement": 8, "verb_form": 8, "preposition": 8,
                "noun_number": 8, "spelling": 30, "capitalization": 8, "punctuation": 10,
                "word_order": 4, "missing_word": 6, "extra_word": 6}

PREPOSITIONS = ["in", "on", "at", "for", "to", "of", "with", "by", "from", "about", "into"]
AUX_PAIRS = {"is": "are", "are": "is", "was": "were", "were": "was", "has": "have",
             "have": "has", "does": "do", "do": "does", "doesn't": "don't", "don't": "doesn't",
             "isn't": "aren't", "aren't": "isn't", "wasn't": "weren't", "weren't": "wasn't"}
IRREGULAR = [("go", "went", "gone"), ("see", "saw", "seen"), ("do", "did", "done"),
             ("take", "took", "taken"), ("give", "gave", "given"), ("write", "wrote", "written"),
             ("eat", "ate", "eaten"), ("begin", "began", "begun"), ("know", "knew", "known"),
             ("come", "came", "come"), ("run", "ran", "run"), ("speak", "spoke", "spoken"),
             ("break", "broke", "broken"), ("choose", "chose", "chosen"),
             ("drive", "drove", "driven"), ("get", "got", "gotten"), ("make", "made", "made"),
             ("think", "thought", "thought"), ("buy", "bought", "bought"),
             ("bring", "brought", "brought"), ("teach", "taught", "taught"),
             ("find", "found", "found"), ("tell", "told", "told"), ("feel", "felt", "felt"),
             ("leave", "left", "left"), ("keep", "kept", "kept"), ("grow", "grew", "grown"),
             ("fall", "fell", "fallen"), ("forget", "forgot", "forgotten"),
             ("become", "became", "become"), ("say", "said", "said"), ("pay", "paid", "paid"),
             ("stand", "stood", "stood"), ("understand", "understood", "understood"),
             ("win", "won", "won"), ("lose", "lost", "lost"), ("meet", "met", "met"),
             ("sell", "sold", "sold"), ("send", "sent", "sent"), ("spend", "spent", "spent"),
             ("build", "built", "built"), ("hold", "held", "held"), ("lead", "led", "led")]
CONFUSIONS = [("their", "there"), ("there", "their"), ("your", "you're"), ("its", "it's"),
              ("it's", "its"), ("then", "than"), ("than", "then"), ("too", "to"),
              ("affect", "effect"), ("effect", "affect"), ("lose", "loose"), ("where", "were"),
              ("were", "where"), ("whether", "weather"), ("quite", "quiet"), ("accept", "except")]
FUNCTION_WORDS = ["the", "a", "to", "of", "is", "that", "and", "in", "for", "it", "be", "with"]
KEYBOARD = {}
for row in ("qwertyuiop", "asdfghjkl", "zxcvbnm"):
    for i, ch in enumerate(row):
        KEYBOARD[ch] = (row[i - 1] if i > 0 else "") + (row[i + 1] if i + 1 < len(row) else "")
VOWELS = "aeiou"
PUNCT = {",", ".", ";", ":", "?", "!", "''", "``"}


class Lexicon:
    """Word forms by tag seen in the training corpus, to inflect words into real forms."""

    def __init__(self, tagged_sentences):
        self.forms = collections.defaultdict(set)
        for sentence in tagged_sentences:
            for word, tag in sentence:
                self.forms[tag].add(word.lower())
        self.irregular_past = {p: (b, pp) for b, p, pp in IRREGULAR}
        self.irregular_participle = {pp: (b, p) for b, p, pp in IRREGULAR}
        self.irregular_base = {b: (p, pp) for b, p, pp in IRREGULAR}

    def has(self, tag, word):
        return word in self.forms[tag]

    def base_of(self, word):
        """The base form of an inflected verb (-s, -ed, -ing), when the corpus knows it."""
        w = word.lower()
        if w in self.irregular_past:
            return self.irregular_past[w][0]
        if w in self.irregular_participle:
            return self.irregular_participle[w][0]
        candidates = []
        for suffix, repl in (("ies", "y"), ("es", ""), ("s", ""), ("ied", "y"), ("ed", ""),
                             ("ed", "e"), ("ing", ""), ("ing", "e")):
            if w.endswith(suffix) and len(w) > len(suffix) + 1:
                stem = w[:-len(suffix)] + repl
                candidates.append(stem)
                if repl == "" and len(stem) > 2 and stem[-1] == stem[-2]:
                    candidates.append(stem[:-1])  # stopped -> stop
        for c in candidates:
            if c in self.forms["vb"]:
                return c
        return None

    def inflect(self, base, form):
        """base + form ('s', 'ed', 'ing', 'en') -> a form the corpus has seen, else None."""
        if form in ("ed", "en") and base in self.irregular_base:
            past, participle = self.irregular_base[base]
            return past if form == "ed" else participle
        tags = {"s": "vbz", "ed": "vbd", "en": "vbn", "ing": "vbg"}[form]
        suffix = {"s": ["s", "es"], "ed": ["ed", "d"], "en": ["ed", "d"], "ing": ["ing"]}[form]
        candidates = [base + s for s in suffix]
        if base.endswith("y"):
            candidates.append(base[:-1] + ("ies" if form == "s" else "ied"))
        if base.endswith("e") and form == "ing":
            candidates.append(base[:-1] + "ing")
        if form in ("ed", "en", "ing"):
            candidates.append(base + base[-1] + suffix[0])
        for c in candidates:
            if c in self.forms[tags]:
                return c
        return None

    def plural(self, noun):
        for c in (noun + "s", noun + "es", noun[:-1] + "ies"):
            if c in self.forms["nns"]:
                return c
        return None

    def singular(self, noun):
        for suffix, repl in (("ies", "y"), ("es", ""), ("s", "")):
            if noun.endswith(suffix):
                c = noun[:-len(suffix)] + repl
                if c in self.forms["nn"]:
                    return c
        return None


def _match_case(template, word):
    if template[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def _positions(tokens, predicate):
    return [i for i, (w, t) in enumerate(tokens) if predicate(w, t)]


def article(tokens, rng, lex):
    arts = _positions(tokens, lambda w, t: t == "at" and w.lower() in ("a", "an", "the"))
    nouns = _positions(tokens, lambda w, t: t in ("nn", "nns") and w.isalpha())
    ops = []
    if arts:
        ops += ["delete", "substitute"]
    if nouns:
        ops.append("insert")
    if not ops:
        return False
    op = rng.choice(ops)
    if op == "insert":
        i = rng.choice(nouns)
        if i > 0 and tokens[i - 1][1] in ("at", "dt", "ap", "pp$", "jj", "cd"):
            return False
        tokens.insert(i, ["the" if rng.random() < 0.6 else "a", "at"])
        if i == 0:
            tokens[0][0] = "The" if tokens[0][0] == "the" else "A"
            tokens[1][0] = tokens[1][0][:1].lower() + tokens[1][0][1:]
        return True
    i = rng.choice(arts)
    word = tokens[i][0]
    if op == "delete":
        del tokens[i]
        if i == 0 and tokens:
            tokens[0][0] = tokens[0][0][:1].upper() + tokens[0][0][1:]
        return True
    low = word.lower()
    choices = {"a": ["the", "an"], "an": ["a", "the"], "the": ["a", "an"]}[low]
    tokens[i][0] = _match_case(word, rng.choice(choices))
    return True


def agreement(tokens, rng, lex):
    aux = _positions(tokens, lambda w, t: w.lower() in AUX_PAIRS)
    verbs = _positions(tokens, lambda w, t: t in ("vbz", "vb") and w.isalpha() and w.islower())
    cands = aux + verbs
    if not cands:
        return False
    i = rng.choice(cands)
    word, tag = tokens[i]
    if word.lower() in AUX_PAIRS:
        tokens[i][0] = _match_case(word, AUX_PAIRS[word.lower()])
        return True
    if tag == "vbz":
        base = lex.base_of(word)
        if base is None or base == word:
            return False
        tokens[i][0] = base
        return True
    # A base form after a plural or I/you subject becomes an -s form.
    if i == 0 or tokens[i - 1][1] in ("to", "md", "do", "dod", "doz"):
        return False
    form = lex.inflect(word, "s")
    if form is None:
        return False
    tokens[i][0] = form
    return True


def verb_form(tokens, rng, lex):
    verbs = _positions(tokens, lambda w, t: t in ("vbd", "vbn", "vbg", "vb") and w.isalpha()
                       and w.islower())
    rng.shuffle(verbs)
    for i in verbs:
        word, tag = tokens[i]
        base = word if tag == "vb" else lex.base_of(word)
        if base is None:
            continue
        if tag == "vbd":
            options = [base, lex.inflect(base, "ing"), lex.inflect(base, "en")]
        elif tag == "vbn":
            options = [base, lex.inflect(base, "ed"), lex.inflect(base, "ing")]
        elif tag == "vbg":
            options = [base, lex.inflect(base, "ed")]
        else:
            options = [lex.inflect(base, "ing"), lex.inflect(base, "ed")]
        options = [o for o in options if o and o != word]
        if options:
            tokens[i][0] = rng.choice(options)
            return True
    return False


def preposition(tokens, rng, lex):
    preps = _positions(tokens, lambda w, t: t == "in" and w.lower() in PREPOSITIONS)
    if not preps:
        return False
    i = rng.choice(preps)
    if rng.random() < 0.25 and i > 0:
        del tokens[i]
        return True
    word = tokens[i][0]
    tokens[i][0] = _match_case(word, rng.choice([p for p in PREPOSITIONS if p != word.lower()]))
    return True


def noun_number(tokens, rng, lex):
    nouns = _positions(tokens, lambda w, t: t in ("nn", "nns") and w.isalpha() and w.islower())
    rng.shuffle(nouns)
    for i in nouns:
        word, tag = tokens[i]
        other = lex.plural(word) if tag == "nn" else lex.singular(word)
        if other and other != word:
            tokens[i][0] = other
            return True
    return False


def _typo(word, rng):
    chars = list(word)
    n = len(chars)
    op = rng.choice(["delete", "insert", "swap", "replace", "double", "vowel"])
    i = rng.randrange(1, n) if n > 1 else 0
    if op == "delete":
        del chars[i]
    elif op == "insert":
        near = KEYBOARD.get(chars[i - 1].lower(), "") or "e"
        chars.insert(i, rng.choice(near + chars[i - 1]))
    elif op == "swap" and i + 1 < n:
        chars[i], chars[i + 1] = chars[i + 1], chars[i]
    elif op == "replace":
        near = KEYBOARD.get(chars[i].lower(), "")
        if not near:
            return None
        chars[i] = rng.choice(near)
    elif op == "double":
        doubled = [k for k in range(1, n) if chars[k] == chars[k - 1]]
        if doubled:
            del chars[rng.choice(doubled)]
        else:
            chars.insert(i, chars[i - 1])
    elif op == "vowel":
        vowels = [k for k in range(1, n) if chars[k] in VOWELS]
        if not vowels:
            return None
        k = rng.choice(vowels)
        chars[k] = rng.choice([v for v in VOWELS if v != chars[k]])
    out = "".join(chars)
    return out if out != word else None


def spelling(tokens, rng, lex):
    confusable = _positions(tokens, lambda w, t: any(w.lower() == a for a, _ in CONFUSIONS))
    if confusable and rng.random() < 0.15:
        i = rng.choice(confusable)
        options = [b for a, b in CONFUSIONS if a == tokens[i][0].lower()]
        tokens[i][0] = _match_case(tokens[i][0], rng.choice(options))
        return True
    words = _positions(tokens, lambda w, t: w.isalpha() and len(w) >= 3)
    rng.shuffle(words)
    for i in words:
        typo = _typo(tokens[i][0], rng)
        if typo:
            tokens[i][0] = typo
            return True
    return False


def capitalization(tokens, rng, lex):
    ops = []
    if tokens[0][0][:1].isupper() and tokens[0][0].isalpha() and tokens[0][0] != "I":
        ops.append("first")
    names = _positions(tokens, lambda w, t: i_ok(w) and t.startswith("np") and w[:1].isupper())
    if names:
        ops.append("name")
    commons = _positions(tokens, lambda w, t: w.isalpha() and w.islower() and t in ("nn", "jj"))
    if commons:
        ops.append("upper")
    if not ops:
        return False
    op = rng.choice(ops)
    if op == "first":
        tokens[0][0] = tokens[0][0][:1].lower() + tokens[0][0][1:]
    elif op == "name":
        i = rng.choice(names)
        tokens[i][0] = tokens[i][0].lower()
    else:
        i = rng.choice(commons)
        tokens[i][0] = tokens[i][0][:1].upper() + tokens[i][0][1:]
    return True


def i_ok(word):
    return word.isalpha() and len(word) > 1


def punctuation(tokens, rng, lex):
    ops = []
    commas = _positions(tokens, lambda w, t: w == ",")
    if commas:
        ops.append("drop_comma")
    if len(tokens) > 1 and tokens[-1][0] in (".", "?", "!"):
        ops.append("drop_final")
    apostrophes = _positions(tokens, lambda w, t: "'" in w and w not in ("''", "'"))
    if apostrophes:
        ops.append("apostrophe")
    if len(tokens) > 4:
        ops.append("add_comma")
    if not ops:
        return False
    op = rng.choice(ops)
    if op == "drop_comma":
        del tokens[rng.choice(commas)]
    elif op == "drop_final":
        del tokens[-1]
    elif op == "apostrophe":
        i = rng.choice(apostrophes)
        tokens[i][0] = tokens[i][0].replace("'", "")
    else:
        i = rng.randrange(2, len(tokens) - 1)
        if tokens[i][0] in PUNCT or tokens[i - 1][0] in PUNCT:
            return False
        tokens.insert(i, [",", ","])
    return True


def word_order(tokens, rng, lex):
    pairs = [i for i in range(1, len(tokens) - 1)
             if tokens[i][0].isalpha() and tokens[i + 1][0].isalpha()
             and tokens[i][0].lower() != tokens[i + 1][0].lower()]
    if not pairs:
        return False
    i = rng.choice(pairs)
    tokens[i], tokens[i + 1] = tokens[i + 1], tokens[i]
    return True


def missing_word(tokens, rng, lex):
    cands = _positions(tokens, lambda w, t: w.lower() in FUNCTION_WORDS)
    cands = [i for i in cands if i > 0]
    if not cands:
        return False
    del tokens[rng.choice(cands)]
    return True


def extra_word(tokens, rng, lex):
    if len(tokens) < 3:
        return False
    i = rng.randrange(1, len(tokens) - 1)
    if rng.random() < 0.4 and tokens[i][0].isalpha():
        tokens.insert(i, [tokens[i][0], tokens[i][1]])
    else:
        tokens.insert(i, [rng.choice(FUNCTION_WORDS), "x"])
    return True


INJECTORS = {"article": article, "agreement": agreement, "verb_form": verb_form,
             "preposition": preposition, "noun_number": noun_number, "spelling": spelling,
             "capitalization": capitalization, "punctuation": punctuation,
             "word_order": word_order, "missing_word": missing_word, "extra_word": extra_word}


def inject(sentence, error_type, rng, lex):
    """One error of `error_type` in a copy of `sentence`: the new token list, or None."""
    tokens = [[w, t] for w, t in sentence]
    if not INJECTORS[error_type](tokens, rng, lex):
        return None
    if [w for w, _ in tokens] == [w for w, _ in sentence]:
        return None
    return tokens


def corrupt(sentence, rng, lex, num_errors):
    """Up to `num_errors` errors of weighted random types; returns (tokens, types applied)."""
    types = list(TYPE_WEIGHTS)
    weights = [TYPE_WEIGHTS[t] for t in types]
    tokens = [[w, t] for w, t in sentence]
    applied = []
    for _ in range(num_errors * 3):
        if len(applied) == num_errors:
            break
        error_type = rng.choices(types, weights)[0]
        new = inject(tokens, error_type, rng, lex)
        if new is not None:
            tokens = new
            applied.append(error_type)
    return tokens, applied
