"""Draws a training log's loss curve (train_log.tsv: step, seq_len, loss, ...; '#' lines are the
pass-key checks, drawn as points on a second axis) as a small SVG, with no plotting library.

    /usr/bin/python3 tools/train/plot_loss.py train_log.tsv train_loss.svg
"""
import re
import sys


def main(log_path, svg_path):
    steps, losses, checks = [], [], []
    with open(log_path) as f:
        for line in f:
            if line.startswith("#"):
                m = re.match(r"# step (\d+): pass-key at (\d+) tokens ([0-9.]+)", line)
                if m:
                    checks.append((int(m.group(1)), float(m.group(3))))
            elif line[:1].isdigit():
                cols = line.split("\t")
                steps.append(int(cols[0]))
                losses.append(float(cols[2]))
    w, h, pad = 640, 320, 48
    x_max = max(steps + [c[0] for c in checks] + [1])
    y_max = max(losses + [1.0])

    def x(s):
        return pad + (w - 2 * pad) * s / x_max

    def y(v, top):
        return h - pad - (h - 2 * pad) * v / top

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{w - pad}" y1="{pad}" x2="{w - pad}" y2="{h - pad}" stroke="#c33"/>']
    for v in range(0, int(y_max) + 1, 2):
        out.append(f'<text x="{pad - 6}" y="{y(v, y_max) + 4:.1f}" text-anchor="end">{v}</text>')
    for r in (0, 0.5, 1.0):
        out.append(f'<text x="{w - pad + 6}" y="{y(r, 1.0) + 4:.1f}" fill="#c33">{r:.1f}</text>')
    tick = next(t for t in (10, 20, 25, 50, 100, 200, 250, 500, 1000, 10 ** 9) if x_max / t <= 8)
    for s in range(0, x_max + 1, tick):
        out.append(f'<text x="{x(s):.1f}" y="{h - pad + 16}" text-anchor="middle">{s}</text>')
    pts = " ".join(f"{x(s):.1f},{y(v, y_max):.1f}" for s, v in zip(steps, losses))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#246" stroke-width="1.5"/>')
    for s, r in checks:
        out.append(f'<circle cx="{x(s):.1f}" cy="{y(r, 1.0):.1f}" r="3" fill="#c33"/>')
    out.append(f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle">step</text>')
    out.append(f'<text x="{pad}" y="{pad - 12}">training loss (line); pass-key recall at 256 tokens (red dots, right axis)</text>')
    out.append("</svg>")
    with open(svg_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
