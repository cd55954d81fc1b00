"""Tests of the training pipeline's data code (tools/train/brown.py, noise.py, lexicon.py): what
the model learns to write, and the spelling stage keeps, is exactly what these produce. Plain
Python; no torch needed."""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "train"))
import brown  # noqa: E402
import lexicon  # noqa: E402
import noise  # noqa: E402


def tagged(text):
    """'He/pps ran/vbd ./.' -> [(word, tag), ...]"""
    return [tuple(item.rsplit("/", 1)) for item in text.split()]


def words(tokens):
    return [w for w, _ in tokens]


CORPUS = [tagged(s) for s in (
    "She/pps goes/vbz to/in the/at park/nn every/at day/nn ./.",
    "They/ppss went/vbd to/in school/nn ./.",
    "The/at dogs/nns were/bed happy/jj ./.",
    "We/ppss go/vb home/nr and/cc he/pps has/hvz gone/vbn ./.",
    "A/at dog/nn is/bez in/in the/at house/nn ./.",
    "Mr./np Smith/np bought/vbd three/cd apples/nns ,/, two/cd pears/nns and/cc a/at melon/nn ./.",
)]


class LexiconTest(unittest.TestCase):
    def test_counts_lower_case_use_and_lists_names_with_zero(self):
        c = lexicon.counts(CORPUS + [tagged("The/at dog/nn don't/do* bark/vb at/in Smith/np ./.")])
        self.assertEqual(c["the"], 2)  # "The" at a sentence start does not count
        self.assertEqual(c["smith"], 0)  # listed (kept as written), never offered
        self.assertEqual(c["don't"], 1)
        self.assertNotIn(".", c)
        self.assertNotIn("mr.", c)

    def test_writes_most_frequent_first(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "lexicon.tsv")
            n = lexicon.write(CORPUS, path)
            lines = open(path).read().splitlines()
        self.assertEqual(len(lines), n)
        self.assertEqual(lines[0], "and\t2")  # ties: alphabetical
        self.assertTrue(all(len(line.split("\t")) == 2 for line in lines))


class NormalizeTest(unittest.TestCase):
    def test_collapses_doubled_punctuation(self):
        out = brown.normalize(tagged("Why/wrb not/* ?/. ?/."))
        self.assertEqual(brown.detokenize(words(out)), "Why not?")
        out = brown.normalize(tagged("He/pps met/vbd Ivan/np Allen/np Jr./np ./."))
        self.assertEqual(brown.detokenize(words(out)), "He met Ivan Allen Jr.")

    def test_moves_final_punctuation_inside_closing_quote(self):
        out = brown.normalize(tagged("He/pps said/vbd ``/`` Wait/vb ''/'' !/. !/."))
        self.assertEqual(brown.detokenize(words(out)), 'He said "Wait!"')

    def test_drops_fragments_that_start_in_lower_case(self):
        self.assertIsNone(brown.normalize(tagged("the/at thump/nn of/in presses/nns ./.")))
        self.assertIsNotNone(brown.normalize(tagged("``/`` Hot/jj dogs/nns ''/'' ./.")))
        self.assertIsNotNone(brown.normalize(tagged("3/cd men/nns came/vbd ./.")))

    def test_keeps_tags_with_their_words(self):
        out = brown.normalize(tagged("Go/vb ''/'' ./."))
        self.assertEqual(out, [("Go", "vb"), (".", "."), ("''", "''")])


class NoiseTest(unittest.TestCase):
    def setUp(self):
        self.lex = noise.Lexicon(CORPUS)

    def test_every_error_type_changes_some_sentence(self):
        rng = random.Random(7)
        for error_type in noise.ERROR_TYPES:
            changed = [noise.inject(s, error_type, rng, self.lex) for s in CORPUS * 20]
            changed = [c for c in changed if c is not None]
            self.assertTrue(changed, error_type)
            for c in changed:
                self.assertNotIn(words(c), [words(s) for s in CORPUS], error_type)

    def test_inject_leaves_the_input_alone(self):
        sentence = CORPUS[0]
        before = list(sentence)
        noise.inject(sentence, "spelling", random.Random(1), self.lex)
        self.assertEqual(sentence, before)

    def test_agreement_errors_use_forms_the_corpus_has(self):
        rng = random.Random(3)
        seen = {w.lower() for s in CORPUS for w, _ in s}
        for _ in range(50):
            out = noise.inject(CORPUS[0], "agreement", rng, self.lex)
            if out is not None:
                self.assertTrue(set(w.lower() for w in words(out)) <= seen | set(
                    noise.AUX_PAIRS.values()), words(out))

    def test_corrupt_is_reproducible_from_the_seed(self):
        a = [noise.corrupt(s, random.Random(11), self.lex, 3) for s in CORPUS]
        b = [noise.corrupt(s, random.Random(11), self.lex, 3) for s in CORPUS]
        self.assertEqual(a, b)
        for tokens, applied in a:
            self.assertLessEqual(len(applied), 3)
            self.assertTrue(set(applied) <= set(noise.ERROR_TYPES))


if __name__ == "__main__":
    unittest.main()
