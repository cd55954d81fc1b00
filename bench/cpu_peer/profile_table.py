"""Merges cpu_step_profile outputs into one markdown table per environment.

  python3 profile_table.py FILE...

Each FILE holds one or more cpu_step_profile runs, each run preceded by a line
`=== env: NAME; ...` (no such line: env "none"). For every environment and concurrency the run
with the shortest step is kept (the one the shared machine disturbed least), and the stages are
printed as rows with the concurrencies as columns: share of the step, and for the matmuls
(achieved GFLOP/s / the same sgemm alone). Standard library only.
"""

import re
import sys


def parse(paths):
    runs = {}  # (env, concurrency) -> (step_ms, head, rows)
    for path in paths:
        env = "none"
        with open(path) as f:
            text = f.read()
        for block in re.split(r"^(?==== env: |### concurrency )", text, flags=re.M):
            if block.startswith("=== env: "):
                env = block[len("=== env: ") :].split(";")[0].strip()
                continue
            if not block.startswith("### concurrency "):
                continue
            head = block.split("\n", 1)[0]
            c = int(re.match(r"### concurrency (\d+)", head)[1])
            step = float(re.search(r"([\d.]+) ms a step", head)[1])
            rows = {}
            for line in block.split("\n"):
                cells = [x.strip() for x in line.strip().strip("|").split("|")]
                if len(cells) == 5 and re.fullmatch(r"[\d.]+", cells[1]):
                    rows[cells[0].strip("*")] = cells[1:]
            key = (env, c)
            if key not in runs or step < runs[key][0]:
                runs[key] = (step, head, rows)
    return runs


def main():
    runs = parse(sys.argv[1:])
    for env in dict.fromkeys(e for e, _ in runs):
        cols = sorted(c for e, c in runs if e == env)
        print(f"\n#### OpenBLAS environment: {env}\n")
        print("| | " + " | ".join(f"{c} in flight" for c in cols) + " |")
        print("|---|" + "---:|" * len(cols))

        def head(pattern, c):
            return re.search(pattern, runs[(env, c)][1])

        print(
            "| tokens / sampled rows a step | "
            + " | ".join(
                "{} / {}".format(*head(r"([\d.]+) tokens and ([\d.]+) sampled", c).groups())
                for c in cols
            )
            + " |"
        )
        print("| step | " + " | ".join(f"{runs[(env, c)][0]:.2f} ms" for c in cols) + " |")
        print(
            "| sentences/s | "
            + " | ".join(head(r"([\d.]+) sentences/s", c)[1] for c in cols)
            + " |"
        )
        names = list(runs[(env, cols[0])][2])
        skip = {"validate", "result", "forward, untimed rest", "final norm", "driver: rest",
                "driver: add next sentences"}
        for name in names:
            if name in skip:
                continue
            cells = []
            for c in cols:
                ms, share, gflops, alone = runs[(env, c)][2].get(name, ["", "", "", ""])
                cell = share
                if gflops:
                    cell += f" ({gflops}" + (f" / {alone}" if alone else "") + ")"
                cells.append(cell)
            bold = name.startswith(("all matmuls", "everything else", "whole step"))
            label = f"**{name}**" if bold else name
            print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
