"""tools/autoscale/traffic.py: trace files (read, rejected with the line number) and the
generated day (the trough, the 30-minute ramp, the spike)."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tools", "autoscale"))
import traffic  # noqa: E402


class TraceTest(unittest.TestCase):
    def test_reads_and_interpolates(self):
        lines = ["time_s,rate", "# a comment", "", "0,100", "2,300", "4, 300 ", "10,0"]
        self.assertEqual(traffic.parse_trace(lines),
                         [100, 200, 300, 300, 300, 250, 200, 150, 100, 50])

    def test_header_is_optional_and_times_may_start_late(self):
        self.assertEqual(traffic.parse_trace(["100,5", "103,5"]), [5, 5, 5])

    def test_malformed_traces_name_the_line(self):
        cases = [
            (["time_s,rate", "0,100", "1,abc"], "trace:3: rate 'abc' is not a number"),
            (["0,100", "5,-1"], "trace:2: rate '-1' must be a finite number >= 0"),
            (["0,100", "1,nan"], "trace:2: rate 'nan' must be a finite number"),
            (["0,1", "x,1"], "trace:2: time_s 'x' is not a number"),
            (["0,1", "5,1", "5,2"], "trace:3: time_s 5 is not after the previous row's 5"),
            (["0,1", "5,1", "3,2"], "trace:3: time_s 3 is not after"),
            (["0,1", "1,2,3"], "trace:2: expected 2 fields (time_s,rate), got 3"),
            (["0;1", "1;2"], "trace:1: expected 2 fields"),
            (["# only", "0,1"], "trace: needs at least 2 rows"),
            (["0,1", "time_s,rate"], "trace:2: time_s 'time_s' is not a number"),
        ]
        for lines, message in cases:
            with self.subTest(lines=lines):
                with self.assertRaises(traffic.TraceError) as ctx:
                    traffic.parse_trace(lines)
                self.assertIn(message, str(ctx.exception))

    def test_file_round_trip_and_errors(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "t.csv")
            rates = [10.0, 20.0 / 3, 30.0, 40.0]
            traffic.write_trace(path, rates)
            self.assertEqual(traffic.read_trace(path), rates)
            with open(path, "a") as f:
                f.write("5,oops\n")
            with self.assertRaisesRegex(traffic.TraceError, r"t\.csv:7: rate 'oops'"):
                traffic.read_trace(path)
            with self.assertRaisesRegex(traffic.TraceError, r"gone\.csv: No such file"):
                traffic.read_trace(os.path.join(d, "gone.csv"))


class DayTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rates = traffic.day(seed=7)

    def at(self, hour, minute=0):
        return self.rates[int(hour * 3600 + minute * 60)]

    def test_shape(self):
        self.assertEqual(len(self.rates), 86400)
        self.assertEqual(traffic.day(seed=7, seconds=100), self.rates[:100])  # seeded
        self.assertNotEqual(traffic.day(seed=8, seconds=100), self.rates[:100])
        noise = 1.15  # a few percent of correlated noise; bounds well beyond it
        self.assertLess(max(self.rates[4 * 3600:7 * 3600]), 40000 * noise)  # the trough
        # The ramp: 40,000 -> 220,000 req/s between 07:30 and 08:00.
        self.assertLess(self.at(7, 30), 40000 * noise)
        self.assertGreater(self.at(8), 220000 / noise)
        self.assertLess(self.at(8), 220000 * noise)
        # The spike: x1.5 within a minute at 14:00.
        self.assertGreater(self.at(14, 3) / self.at(13, 58), 1.5 / noise ** 2)
        self.assertLess(self.at(14, 20) / self.at(13, 58), noise ** 2)
        self.assertGreater(max(self.rates), 270000)


if __name__ == "__main__":
    unittest.main()
