"""A throughput model of PostgreSQL appends, fitted to the recorded benchmarks (ADR-0085).

Issue 23, point 5. Reads ``benchmarks/results/client_cpu.json`` (the client's CPU and wall
time of one single-message append, one writer), ``benchmarks/results/pg_order.json``
(appends/s of 1-16 writers under the table lock and the horizon, on this 2-core machine) and,
when present, ``benchmarks/results/pg_append.json`` (a run whose commits were slow: the raw
INSERT's time per append is the commit latency there). It fits:

- ``c``: client CPU per append (client_cpu ``ours_cpu_us``);
- ``t``: the rest of one append's wall time at one writer (server CPU, round trips, the
  commit's WAL flush): ``ours_wall_us - ours_cpu_us``;
- on this machine, the horizon's plateau (its best rate at 2 or more writers), the lock's
  hold time ``h_box`` (the lock order's best rate at 2 or more writers is ``1 / h_box``) and
  the efficiency ``eta`` (the horizon's plateau over what two cores would do at ``c + t`` of
  CPU per append: the rest goes to the sampler, the WAL writer, other load);
- the Universal Scalability Law (``X(N) = X1 N / (1 + s (N-1) + k N (N-1))``) per order, by
  least squares on the relative error, as a second view of the same points.

and prints, for a larger server (``--cores``, default 32; writers on client machines of their
own, so the client CPU is theirs), the appends/s predicted at 16, 64 and 256 writers under
each order and three commit latencies: as measured (``t``), a synchronous replica (+1 ms)
and the slow run of pg_append. The model (ADR-0085)::

    horizon: X(N) = min(N / (c + t + L), eta * cores / s_cpu)
    lock:    X(N) = min(N / (c + t + L), eta * cores / s_cpu, 1 / (t + L))

``s_cpu = t`` (all of the server's time counted as CPU: an upper bound, so the CPU ceiling
is a lower bound) and the lock is held from the insert to the end of the commit (``t + L``).
No time is measured here. Run from the project root::

    .venv/bin/python -m benchmarks.pg_model [--cores 32] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
WRITERS = (16, 64, 256)


def _load(name: str) -> Any:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def usl(n: float, x1: float, sigma: float, kappa: float) -> float:
    return x1 * n / (1 + sigma * (n - 1) + kappa * n * (n - 1))


def fit_usl(points: list[tuple[int, float]]) -> tuple[float, float, float]:
    """(X1, sigma, kappa) minimising the squared relative error, X1 the one-writer rate."""
    x1 = dict(points)[1]
    best = (float("inf"), 0.0, 0.0)
    for i in range(201):
        sigma = i / 200
        for j in range(401):
            kappa = j / 2000
            error = sum((usl(n, x1, sigma, kappa) / x - 1) ** 2 for n, x in points)
            if error < best[0]:
                best = (error, sigma, kappa)
    return x1, best[1], best[2]


def fit(client_cpu: Any, pg_order: Any, pg_append: Any) -> dict[str, Any]:
    row = next(r for r in client_cpu["rows"] if r["case"] == "postgresql")
    c = row["ours_cpu_us"] / 1e6
    t = (row["ours_wall_us"] - row["ours_cpu_us"]) / 1e6
    cores_box = pg_order["machine"]["cpus"]
    series = {
        order: sorted((r["writers"], r["appends_per_second"])
                      for r in pg_order["rows"] if r.get("side", r.get("order")) == order)
        for order in ("lock", "horizon")
    }
    horizon_best = max(x for n, x in series["horizon"] if n > 1)
    lock_best = max(x for n, x in series["lock"] if n > 1)
    eta = horizon_best / (cores_box / (c + t))
    slow = None
    if pg_append is not None:
        raw = next(r for r in pg_append["single_writer"] if r["variant"] == "raw")
        slow = raw["us_per_append"] / 1e6
    return {
        "c": c, "t": t, "cores_box": cores_box, "eta": eta, "h_box": 1 / lock_best,
        "horizon_best": horizon_best, "lock_best": lock_best, "series": series,
        "usl": {order: fit_usl(points) for order, points in series.items()},
        "slow_commit": slow,
    }


def predict(model: dict[str, Any], writers: int, cores: int, latency: float,
            order: str) -> float:
    c, t, eta = model["c"], model["t"], model["eta"]
    bounds = [writers / (c + t + latency), eta * cores / t]
    if order == "lock":
        bounds.append(1 / (t + latency))
    return min(bounds)


def box(model: dict[str, Any], writers: int, order: str) -> float:
    """This machine: client and server share its cores (the plateau), the lock held
    ``h_box``; one writer's cycle is the order's own one-writer point."""
    one = dict(model["series"][order])[1]
    bounds = [writers * one, model["horizon_best"]]
    if order == "lock":
        bounds.append(1 / model["h_box"])
    return min(bounds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=32, help="the larger server's cores")
    parser.add_argument("--json", action="store_true", help="print the table as JSON too")
    args = parser.parse_args(argv)
    client_cpu, pg_order = _load("client_cpu.json"), _load("pg_order.json")
    if client_cpu is None or pg_order is None:
        print("needs benchmarks/results/client_cpu.json and pg_order.json", file=sys.stderr)
        return 2
    model = fit(client_cpu, pg_order, _load("pg_append.json"))
    c, t = model["c"], model["t"]
    print(f"fitted: client CPU c = {c * 1e3:.3f} ms, server+commit t = {t * 1e3:.3f} ms per "
          f"append (client_cpu.json); this machine ({model['cores_box']} cores): horizon best "
          f"{model['horizon_best']:.0f}/s, efficiency eta = {model['eta']:.2f}; lock best "
          f"{model['lock_best']:.0f}/s, hold h_box = {model['h_box'] * 1e3:.2f} ms")
    print("\nthis machine, measured vs model (appends/s):")
    print("| writers | lock measured | lock model | horizon measured | horizon model |")
    print("|---:|---:|---:|---:|---:|")
    measured = {order: dict(points) for order, points in model["series"].items()}
    for n in sorted(measured["horizon"]):
        print(f"| {n} | {measured['lock'][n]:.0f} | {box(model, n, 'lock'):.0f} | "
              f"{measured['horizon'][n]:.0f} | {box(model, n, 'horizon'):.0f} |")
    print("\nUSL fits on this machine (X1, sigma, kappa):")
    for order, (x1, sigma, kappa) in model["usl"].items():
        peak = ("no gain past one writer" if sigma >= 1 else
                f"peak at {((1 - sigma) / kappa) ** 0.5 if kappa else float('inf'):.1f} writers")
        print(f"  {order}: X1 = {x1:.0f}/s, sigma = {sigma:.3f}, kappa = {kappa:.4f}, "
              f"{peak}; at 16/64/256: "
              + ", ".join(f"{usl(n, x1, sigma, kappa):.0f}" for n in WRITERS))
    latencies = [("as measured", 0.0), ("sync replica +1 ms", 0.001)]
    if model["slow_commit"] is not None:
        latencies.append((f"slow commits ({model['slow_commit'] * 1e3:.2f} ms, pg_append)",
                          max(model["slow_commit"] - t, 0.0)))
    print(f"\nlarger server: {args.cores} cores, writers on their own client cores "
          f"(appends/s, all writers):")
    print("| commit latency | order | " + " | ".join(f"{n} writers" for n in WRITERS) + " |")
    print("|---|---|" + "---:|" * len(WRITERS))
    table = []
    for label, latency in latencies:
        for order in ("lock", "horizon"):
            values = [predict(model, n, args.cores, latency, order) for n in WRITERS]
            table.append({"latency": label, "order": order,
                          **{str(n): round(v) for n, v in zip(WRITERS, values, strict=True)}})
            print(f"| {label} | {order} | " + " | ".join(f"{v:,.0f}" for v in values) + " |")
    ceiling = model["eta"] * args.cores / t
    print(f"\nserver CPU ceiling eta*cores/t = {ceiling:,.0f}/s; lock ceiling 1/(t+L) = "
          + ", ".join(f"{1 / (t + latency):,.0f}/s ({label})" for label, latency in latencies))
    if args.json:
        print(json.dumps({"cores": args.cores, "c": c, "t": t, "eta": model["eta"],
                          "predictions": table}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
