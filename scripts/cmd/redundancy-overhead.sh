# help: failure-free overhead of partial redundancy against its degree R; SVG plot
# Failure-free overhead of partial redundancy against its degree R (seed 001, eq. 1:
# t_Red = (1 - alpha) t + alpha t R): the stencil of V virtual ranks as `reverb run -n V
# --redundancy R` for R in 1, 1.25, 1.5, 2, 3 and as a plain job, interleaved (every
# configuration once per round, N rounds), best of N. Per configuration it prints the wall
# time and the CPU time of one copy (mean over the job's processes, from the runtime reports),
# their ratio to the plain job, the alpha that ratio implies (cpu ratio - 1) / (R - 1), and
# the messages one copy sends against a plain rank (what eq. 1's alpha term scales); an SVG
# plot of the ratios with the model's line at `reverb model redundancy`'s alpha goes to PLOT. Ranks wait on events (REVERB_WAIT_MODE=event), so a process's CPU time is its own work
# even when more processes than cores share the machine (then the wall time grows with the
# processes, which eq. 1 does not count: it gives every copy its own core).
#
#   scripts/reverb-scripts redundancy-overhead [rounds]    (default 5; env: REVERB_BIN=path/to/reverb,
#                                               V=4, ITERS=400, SIZE=256,
#                                               DEGREES="1 1.25 1.5 2 3", ALPHA=0.2,
#                                               PLOT=docs/img/redundancy-overhead.svg)
ROUNDS=${1:-5}
V=${V:-4}
ITERS=${ITERS:-400}
SIZE=${SIZE:-256}
DEGREES=${DEGREES:-1 1.25 1.5 2 3}
ALPHA=${ALPHA:-0.2}
PLOT=${PLOT:-docs/img/redundancy-overhead.svg}
rs_build
REVERB=$reverb
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export REVERB_WAIT_MODE=event REVERB_LOG=none REVERB_CKPT=off

run() { # config round: prints "wall_ms mean_cpu_ms mean_messages_sent"
    local config=$1 dir="$OUT/$1-$2" redundancy=()
    [[ $config == plain ]] || redundancy=(--redundancy "$config")
    mkdir -p "$dir"
    local t0 t1
    t0=$(date +%s%N)
    REVERB_RUNTIME_REPORT=$dir "$REVERB" run -n "$V" "${redundancy[@]}" --timeout 600 -- \
        "$REVERB" app stencil --iters "$ITERS" --size "$SIZE" --ckpt-every 0 >"$dir/out" 2>&1
    t1=$(date +%s%N)
    python3 - "$dir" $(((t1 - t0) / 1000000)) <<'PY'
import json, pathlib, sys
d, wall = pathlib.Path(sys.argv[1]), int(sys.argv[2])
reports = [json.loads(p.read_text()) for p in d.glob("rank-*.json")]
cpu = [r["compute_cpu_ms"] for r in reports]
sent = [r["messages_sent"] for r in reports]
print(wall, sum(cpu) / len(cpu), sum(sent) / len(sent))
PY
}

for round in $(seq "$ROUNDS"); do
    for config in plain $DEGREES; do
        echo "$config $(run "$config" "$round")" >>"$OUT/all"
    done
    echo "round $round of $ROUNDS done" >&2
done

python3 - "$OUT/all" "$ALPHA" "$PLOT" "$V" "$ITERS" "$SIZE" <<'PY'
import sys
rows, alpha, plot = sys.argv[1], float(sys.argv[2]), sys.argv[3]
best, sent = {}, {}
for line in open(rows):
    config, wall, cpu, msgs = line.split()
    w, c = best.get(config, (float("inf"), float("inf")))
    best[config] = (min(w, float(wall)), min(c, float(cpu)))
    sent[config] = float(msgs)
w0, c0 = best["plain"]
print(f"stencil V={sys.argv[4]} iters={sys.argv[5]} size={sys.argv[6]}, best of the rounds")
print(f"{'R':>6} {'wall ms':>9} {'x plain':>8} {'cpu/copy ms':>12} {'x plain':>8} {'alpha':>6} {'eq.1 at alpha':>14} {'sends/copy x':>13}")
points = []
for config, (w, c) in best.items():
    r = 1.0 if config == "plain" else float(config)
    implied = (c / c0 - 1) / (r - 1) if r > 1 else float("nan")
    model = 1 + alpha * (r - 1)
    msgs = sent[config] / sent["plain"]
    print(f"{config:>6} {w:9.0f} {w / w0:8.2f} {c:12.1f} {c / c0:8.2f} {implied:6.2f} {model:14.2f} {msgs:13.2f}")
    if config != "plain":
        points.append((r, w / w0, c / c0))
# A small SVG: ratio against R, CPU per copy (dots), wall (squares), eq. 1 (line).
W, H, L, B = 480, 320, 50, 40
ymax = max(3.2, max(max(p[1], p[2]) for p in points) * 1.1)
X = lambda r: L + (r - 1) / 2 * (W - L - 20)
Y = lambda v: H - B - (v - 0.8) / (ymax - 0.8) * (H - B - 20)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="11">',
       f'<line x1="{L}" y1="{H-B}" x2="{W-20}" y2="{H-B}" stroke="black"/>',
       f'<line x1="{L}" y1="{H-B}" x2="{L}" y2="20" stroke="black"/>',
       f'<text x="{W/2}" y="{H-8}" text-anchor="middle">redundancy degree R</text>',
       f'<text x="12" y="{H/2}" transform="rotate(-90 12 {H/2})" text-anchor="middle">time / plain job</text>']
for r in (1, 1.5, 2, 2.5, 3):
    svg.append(f'<text x="{X(r)}" y="{H-B+14}" text-anchor="middle">{r}</text>')
v = 1.0
while v <= ymax:
    svg.append(f'<text x="{L-6}" y="{Y(v)+4}" text-anchor="end">{v:.1f}</text>')
    v += 0.5
svg.append(f'<polyline fill="none" stroke="gray" stroke-dasharray="4" points="{X(1)},{Y(1)} {X(3)},{Y(1 + alpha * 2)}"/>')
svg.append(f'<text x="{X(3)-4}" y="{Y(1 + alpha * 2)-6}" text-anchor="end" fill="gray">eq. 1, alpha {alpha}</text>')
for r, w, c in points:
    svg.append(f'<circle cx="{X(r)}" cy="{Y(c)}" r="4" fill="steelblue"/>')
    svg.append(f'<rect x="{X(r)-4}" y="{Y(w)-4}" width="8" height="8" fill="darkorange"/>')
svg.append(f'<circle cx="{L+20}" cy="30" r="4" fill="steelblue"/><text x="{L+30}" y="34">CPU per copy</text>')
svg.append(f'<rect x="{L+16}" y="42" width="8" height="8" fill="darkorange"/><text x="{L+30}" y="50">wall (2 cores shared)</text>')
svg.append('</svg>')
open(plot, "w").write("\n".join(svg) + "\n")
print(f"plot: {plot}")
PY
