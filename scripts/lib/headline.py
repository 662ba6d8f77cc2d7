"""The headline table (markdown) from the text reports `reverb-scripts headline` collected.

argv: RESULTS DATE MACHINE COMMIT LOAD_START LOAD_END PARTS. Reads RESULTS/demo.txt (`reverb
demo`'s report), RESULTS/shm.txt (`compare shm`'s table) and RESULTS/mpi.txt (`compare mpi`'s
table); a part that did not run or failed gives a row that says so.
"""
import os
import re
import sys

results, date, machine, commit, load0, load1, parts = sys.argv[1:8]
parts = parts.split(",")


def read(name):
    path = os.path.join(results, f"{name}.txt")
    return open(path).read() if os.path.exists(path) else ""


def num(s):
    try:
        return float(s)
    except ValueError:
        return None


def ratio(a, b, digits=2):
    return f"{a / b:.{digits}f}×" if a is not None and b else "-"


rows = []  # (what, reverb, anchor, ratio)


def demo_rows(text):
    m = re.search(r"failure-free time: off (\S+) s, causal \+ checkpoints (\S+) s: overhead (\S+)% "
                  r"\(best of (\d+)\), (\S+)% \(median of (\d+) interleaved pairs, 95% CI (\S+)% \.\. (\S+)%\)",
                  text)
    if not m:
        rows.append(("demo (`reverb demo`)", "failed: no report", "-", "-"))
        return
    off, on, best, n, median, pairs, lo, hi = m.groups()
    ckpts = re.search(r"checkpoints: (\d+) per rank", text)
    what = f"demo failure-free overhead, wall (causal + {ckpts.group(1) if ckpts else '?'} checkpoints)"
    rows.append((f"{what}, median of {pairs} interleaved pairs",
                 f"{median} % (95 % CI {lo} .. {hi} %); best of {n}: {best} %",
                 f"logging off: {off} s (causal: {on} s, best of {n})", ratio(num(on), num(off), 3)))
    cpu = re.search(r"failure-free cpu time, all ranks: overhead (\S+)% \(median of pairs, 95% CI (\S+)% \.\. (\S+)%\)",
                    text)
    if cpu:
        rows.append(("demo failure-free overhead, CPU time of all ranks",
                     f"{cpu.group(1)} % (95 % CI {cpu.group(2)} .. {cpu.group(3)} %)", "logging off", "-"))
    rec = re.search(r"recovery time \(SIGKILL to restarted ranks resuming\):\s+(\S+) ms", text)
    det = re.search(r"detection time \(SIGKILL to first survivor noticing\): (\S+) ms", text)
    same = re.search(r"checksums identical:\s+(\S+)", text)
    if rec:
        detected = f" (detection {det.group(1)} ms)" if det else ""
        rows.append(("demo SIGKILL → restarted ranks resuming", f"{rec.group(1)} ms{detected}",
                     f"checksums identical: {same.group(1) if same else '?'}", "-"))


SHM_ROWS = [("put lat 8 B", "shm put latency, 8 B (µs, median half round trip)"),
            ("tag lat 8 B", "shm tagged latency, 8 B (µs)"),
            ("tag lat 64 KiB", "shm tagged latency, 64 KiB (µs)"),
            ("put bw 1 MiB", "shm put bandwidth, 1 MiB (MiB/s)"),
            ("tag bw 1 MiB", "shm tagged bandwidth, 1 MiB (MiB/s)")]


def shm_rows(text):
    table = {}
    for line in text.splitlines():
        m = re.match(r"((?:put|tag) (?:lat|bw) \d+ \S+) \[[^]]*\]\s+(\S+)\s+(\S+)", line)
        if m:
            table[m.group(1)] = (num(m.group(2)), num(m.group(3)))
    memcpy = re.search(r"^memcpy 1 MiB \[MiB/s\]\s+(\S+)", text, re.M)
    memcpy = num(memcpy.group(1)) if memcpy else None
    if not table:
        rows.append(("shm (`compare shm`)", "failed: no table", "-", "-"))
        return
    for key, what in SHM_ROWS:
        reverb, ucx = table.get(key, (None, None))
        value = f"{reverb:.3f}" if reverb is not None and "lat" in key else f"{reverb:.0f}" if reverb else "-"
        if ucx is not None:
            rows.append((what, value, f"UCX shared memory {ucx:g}", ratio(reverb, ucx)))
        elif "bw 1 MiB" in key and memcpy:
            rows.append((what, value, f"memcpy on one core {memcpy:.0f} (UCX not installed)", ratio(reverb, memcpy)))
        else:
            rows.append((what, value, "UCX not installed", "-"))


def mpi_rows(text):
    found = False
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 6 and f[0] == "lat" and f[1].isdigit():
            found = True
            size = "8 B" if f[1] == "8" else f"{int(f[1]) // 1024} KiB"
            reverb = num(f[3])
            for name, value in (("MPICH", f[4]), ("Open MPI", f[5])):
                v = num(value)
                anchor = f"{name} {value}" if v is not None else f"{name} not installed"
                rows.append((f"MPI latency, {size} (µs, same `mpicc.mpich` binary)",
                             f[3], anchor, ratio(reverb, v)))
    if not found:
        rows.append(("MPI (`compare mpi`)", "failed: no table", "-", "-"))


SKIPPED = {"demo": "demo failure-free overhead and recovery (`reverb demo --repeat 3`)",
           "shm": "shm latency and bandwidth (`compare shm`)",
           "mpi": "MPI latency against MPICH and Open MPI (`compare mpi`)"}
for name, rows_of in (("demo", demo_rows), ("shm", shm_rows), ("mpi", mpi_rows)):
    if name in parts:
        rows_of(read(name))
    else:
        rows.append((SKIPPED[name], "not run this time (`--only`)", "-", "-"))

# The date only, and no commit: docs/ describes the current state (ci/docs-lint.sh); the
# commit is in RESULTS/commit.txt.
open(os.path.join(results, "commit.txt"), "w").write(commit + "\n")
print(f"Measured by `scripts/reverb-scripts headline` on {date[:10]}: {machine}; "
      f"load average {load0} at the start, {load1} at the end.")
print("One quick round each, so a busy machine moves single figures by tens of percent; ratios are "
      "reverb / anchor (latency and overhead: below 1 is better; bandwidth: above 1 is better). "
      "How each is measured: [benchmarks](docs/benchmarks.md), [fault tolerance](docs/fault-tolerance.md), "
      "[MPI](docs/mpi.md).")
print()
print("| What | reverb | Anchor | reverb / anchor |")
print("|---|---|---|---|")
for row in rows:
    print("| " + " | ".join(row) + " |")
