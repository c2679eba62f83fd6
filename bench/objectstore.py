"""The bundled example on local folders and on S3 (moto's server, this machine's loopback): the
wall time of one whole run (every stage and check, `dagster.materialize`, in process) and, on
S3, the objects the zones hold afterwards, their bytes, and the requests the run made.

The S3 server runs in this process (moto's threaded server), so the times measure dp-synth's
extra work on object storage (uploads, the pointer, the staged Data Docs, the probes when the
definitions load), not a network's latency. Writes bench/results/objectstore.json.

    .venv/bin/python bench/objectstore.py [--rows 3000] [--repeats 2]
"""

import argparse
import json
import logging
import os
import platform
import socket
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS  # noqa: E402
sys.path.insert(0, str(REPO))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(folder: Path, rows: int, public: str | None, private: str | None) -> dict:
    import dagster as dg

    from dp_synth_assets.definitions import build_definitions
    from tests.helpers import EXAMPLE_REPORT, make_project

    project = make_project(folder, rows=rows, report=EXAMPLE_REPORT)
    started = time.perf_counter()
    defs = build_definitions(project.datasets, project.warehouse, project.ledger,
                             public or project.public, private_dir=private)
    loaded = time.perf_counter()
    result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(), raise_on_error=False)
    done = time.perf_counter()
    checks = result.get_asset_check_evaluations()
    return {"success": result.success, "checks_passed": sum(c.passed for c in checks),
            "load_seconds": round(loaded - started, 2), "run_seconds": round(done - loaded, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from moto.server import ThreadedMotoServer

    counter = RequestCounter()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.INFO)
    werkzeug.addHandler(counter)
    werkzeug.propagate = False
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}")
    import s3fs

    fs = s3fs.S3FileSystem(use_listings_cache=False)
    for bucket in ("bench-public", "bench-private"):
        fs.mkdir(bucket)
    record = {"rows": args.rows, "python": platform.python_version(), "cpus": os.cpu_count(),
              "local": [], "s3": []}
    try:
        for i in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                record["local"].append(one_run(Path(tmp), args.rows, None, None))
            with tempfile.TemporaryDirectory() as tmp:
                public, private = f"s3://bench-public/run{i}", f"s3://bench-private/run{i}"
                requests_before = counter.count
                run = one_run(Path(tmp), args.rows, public, private)
                run["requests"] = counter.count - requests_before
                names = fs.find(public.removeprefix("s3://"), detail=True)
                run["public_objects"] = len(names)
                run["public_bytes"] = sum(v["size"] for v in names.values())
                run["private_objects"] = len(fs.find(private.removeprefix("s3://")))
                record["s3"].append(run)
            print(json.dumps({"local": record["local"][-1], "s3": record["s3"][-1]}))
    finally:
        server.stop()
    out = RESULTS / "objectstore.json"
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out}")


class RequestCounter(logging.Handler):
    """Counts the requests moto's server (werkzeug) logs, one line each, and prints none."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


if __name__ == "__main__":
    main()
