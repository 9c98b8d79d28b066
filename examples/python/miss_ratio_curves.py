"""Miss-ratio curves of several policies on a block trace, and a policy written
in Python beside them, plotted to an SVG file (no plotting library needed).

    pip install ./python
    python3 examples/python/miss_ratio_curves.py [TRACE] [OUT.svg]

TRACE defaults to the sample CloudPhysics trace in the repo; OUT to
miss_ratio_curves.svg. Cairn's policies run in Rust on every core; the Python
policy (CLOCK, below) runs through libCacheSim-style hooks in the same replay.
"""

import sys
from pathlib import Path

import cairn

REPO = Path(__file__).resolve().parents[2]
trace = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "crates/cairn/data/cloudPhysicsIO.oracleGeneral.bin.zst"
out = Path(sys.argv[2]) if len(sys.argv) > 2 else Path("miss_ratio_curves.svg")


# --- A policy in Python: CLOCK (second chance) -------------------------------
def clock_init(capacity):
    # The ring of resident keys, the hand, each key's reference bit, and the
    # slot the last eviction freed (the new key takes it, as in a real CLOCK).
    return {"ring": [], "hand": 0, "referenced": {}, "free": None}


def clock_hit(data, request):
    data["referenced"][request.obj_id] = True


def clock_miss(data, request):
    if data["free"] is None:
        data["ring"].append(request.obj_id)
    else:
        data["ring"][data["free"]] = request.obj_id
        data["hand"] = (data["free"] + 1) % len(data["ring"])
        data["free"] = None
    data["referenced"][request.obj_id] = False


def clock_evict(data, request):
    ring, referenced = data["ring"], data["referenced"]
    while True:
        key = ring[data["hand"]]
        if referenced[key]:
            referenced[key] = False
            data["hand"] = (data["hand"] + 1) % len(ring)
        else:
            del referenced[key]
            data["free"] = data["hand"]
            return key


py_clock = cairn.PluginCache(1, clock_init, clock_hit, clock_miss, clock_evict, cache_name="clock (Python)")

# --- Simulate ----------------------------------------------------------------
fractions = [0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3]
policies = ["lru", "clock", "arc", "s3fifo", ("opt", {"bypass": False}), py_clock]
rows = cairn.sim(trace, policies, fractions)
curves = {}
for row in rows:
    curves.setdefault(row["policy"], []).append((row["capacity"], row["miss_ratio"]))
lru_exact = cairn.mrc(trace, points=40)  # Mattson's stack algorithm, every size at once

print(f"{'policy':16}" + "".join(f"{f:>8.0%}" for f in fractions))
for name, points in curves.items():
    print(f"{name:16}" + "".join(f"{ratio:8.4f}" for _, ratio in sorted(points)))

# --- Plot (plain SVG) --------------------------------------------------------
W, H, PAD = 720, 440, 60
max_x = max(size for size, _ in lru_exact)
all_ratios = [r for pts in curves.values() for _, r in pts] + [r for _, r in lru_exact]
lo, hi = min(all_ratios) - 0.02, min(1.0, max(all_ratios) + 0.02)


def xy(size, ratio):
    return (PAD + (W - 2 * PAD) * size / max_x, H - PAD - (H - 2 * PAD) * (ratio - lo) / (hi - lo))


colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#7f7f7f"]
parts = [
    f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
    f'<rect width="{W}" height="{H}" fill="white"/>',
    f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="black"/>',
    f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="black"/>',
    f'<text x="{W / 2}" y="{H - 20}" text-anchor="middle">cache size (objects)</text>',
    f'<text x="15" y="{H / 2}" transform="rotate(-90 15 {H / 2})" text-anchor="middle">miss ratio</text>',
    f'<text x="{W / 2}" y="30" text-anchor="middle" font-size="14">{trace.name}</text>',
]
for tick in range(5):
    ratio = lo + (hi - lo) * tick / 4
    _, y = xy(0, ratio)
    parts.append(f'<text x="{PAD - 8}" y="{y + 4:.1f}" text-anchor="end">{ratio:.2f}</text>')
    size = max_x * tick / 4
    x, _ = xy(size, lo)
    parts.append(f'<text x="{x:.1f}" y="{H - PAD + 16}" text-anchor="middle">{size:.0f}</text>')
series = [("lru (exact MRC)", lru_exact)] + list(curves.items())
for i, (name, points) in enumerate(series):
    colour = colours[i % len(colours)]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(s, r) for s, r in sorted(points)))
    dash = ' stroke-dasharray="4 3"' if i == 0 else ""
    parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>')
    parts.append(f'<text x="{W - PAD - 150}" y="{PAD + 16 * i}" fill="{colour}">{name}</text>')
parts.append("</svg>")
out.write_text("\n".join(parts) + "\n")
print(f"wrote {out}")
