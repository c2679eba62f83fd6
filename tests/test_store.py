"""The artifact store (dp_synth_assets/infra/store.py): each artifact round-trips through a folder
store and a memory store, a missing one names the stage that writes it, a file is parsed once per
store, and a failed write leaves the previous file and no partial or temporary file."""

import json
import os

import numpy as np
import pytest

from dp_synth_assets.core import generate
from dp_synth_assets.infra import store
from dp_synth_assets.core.domain import Encoding, EncodingPlan
from dp_synth_assets.core.measure import Measurement, Measurements
from dp_synth_assets.core.select import Selection
from dp_synth_assets.infra.store import FolderStore, MemoryStore, MissingArtifact, atomic_write

DOMAIN = {"a": 3, "b": 2}


def records():
    plan = EncodingPlan((Encoding("a", "categorical", "VARCHAR", 3, categories=("x", "y")),
                         Encoding("b", "boolean", "BOOLEAN", 2)))
    one_way = tuple(Measurement((c,), np.arange(k, dtype=float) + 0.25, 1.5, 0.1)
                    for c, k in DOMAIN.items())
    ab = Measurement(("a", "b"), np.arange(6, dtype=float).reshape(3, 2) / 3, 2.0, 0.2)
    selection = Selection("mst", one_way, (("a", "b"),), {("a", "b"): 0.2},
                          {("a", "b"): 1.25}, {"rounds": [1]}, ())
    found = Measurements(one_way + (ab,), 5.125)
    model = generate.GumModel(dict(DOMAIN), found.measurements, 7)
    return plan, selection, found, model


def same_measurements(x, y) -> bool:
    return [(m.clique, m.sigma, m.rho) for m in x] == [(m.clique, m.sigma, m.rho) for m in y] \
        and all(np.allclose(m.noisy, n.noisy, atol=1e-6) for m, n in zip(x, y))


@pytest.mark.parametrize("kind", ["folder", "memory"])
def test_every_artifact_round_trips(tmp_path, kind):
    plan, selection, found, model = records()
    written = FolderStore(tmp_path, "d") if kind == "folder" else MemoryStore("d")
    written.write_plan(plan)
    written.write_selection(selection)
    written.write_measurements(found)
    written.write_model(model)
    read = FolderStore(tmp_path, "d") if kind == "folder" else written
    assert read.plan() == plan
    back = read.selection()
    assert (back.method, back.cliques, back.budgets, back.scores, back.details) == (
        "mst", (("a", "b"),), {("a", "b"): 0.2}, {("a", "b"): 1.25}, {"rounds": [1]})
    assert same_measurements(back.one_way, selection.one_way)
    assert read.measurements().noisy_total == 5.125
    assert same_measurements(read.measurements().measurements, found.measurements)
    assert read.model().iterations == 7 and read.model().domain == DOMAIN
    assert same_measurements(read.model().measurements, found.measurements)


def test_the_folder_keeps_the_pipelines_file_names_and_json_layout(tmp_path):
    plan, selection, found, model = records()
    s = FolderStore(tmp_path, "d")
    paths = [s.write_plan(plan), s.write_selection(selection), s.write_measurements(found),
             s.write_model(model)]
    assert [os.path.basename(p) for p in paths] == [
        "plan.json", "selection.json", "measurements.json", "model.npz"]
    data = json.loads((tmp_path / "measurements.json").read_text())
    assert list(data) == ["noisy_total", "measurements"] and data["noisy_total"] == 5.125
    assert EncodingPlan.from_json((tmp_path / "plan.json").read_text()) == plan
    assert generate.loads((tmp_path / "model.npz").read_bytes()).iterations == 7
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(os.path.basename(p) for p in paths)


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["folder", "memory"])
def test_a_missing_artifact_names_the_stage_to_materialize(tmp_path, kind):
    s = FolderStore(tmp_path / "d", "people") if kind == "folder" else MemoryStore("people")
    for read, stage in [(s.plan, "preprocessed"), (s.selection, "selection"),
                        (s.measurements, "measurements"), (s.model, "model")]:
        with pytest.raises(MissingArtifact, match=f"dataset 'people'.*materialize the "
                                                  f"'{stage}' stage"):
            read()


def test_a_folder_store_parses_each_file_once_until_it_writes_it(tmp_path, monkeypatch):
    plan, *_ = records()
    FolderStore(tmp_path, "d").write_plan(plan)
    parsed = []
    original = EncodingPlan.from_json
    monkeypatch.setattr(EncodingPlan, "from_json",
                        classmethod(lambda cls, text: parsed.append(1) or original(text)))
    s = FolderStore(tmp_path, "d")
    assert s.plan() == s.plan() == plan and len(parsed) == 1
    s.write_plan(plan)
    assert s.plan() == plan and len(parsed) == 2  # a write drops the parsed copy


def test_a_failed_write_leaves_the_previous_file_and_no_partial_one(tmp_path, monkeypatch):
    target = tmp_path / "measurements.json"
    atomic_write(target, b"previous")

    class DiskFull(OSError):
        pass

    real_fsync = os.fsync

    def fault(fd):  # the data has been written to the temporary file when this fails
        raise DiskFull("no space left on device")

    monkeypatch.setattr(store.os, "fsync", fault)
    with pytest.raises(DiskFull):
        atomic_write(target, b"new content that never lands")
    monkeypatch.setattr(store.os, "fsync", real_fsync)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["measurements.json"]  # no temporary left

    # a failed export through atomic_target neither replaces the file nor leaves one behind
    s = FolderStore(tmp_path, "d")
    atomic_write(s.path("synthetic.parquet"), b"old table")
    with pytest.raises(RuntimeError):
        with s.writing("synthetic.parquet") as tmp:
            tmp.write_bytes(b"half a tab")
            raise RuntimeError("the export failed")
    assert s.path("synthetic.parquet").read_bytes() == b"old table"
    with s.writing("synthetic.parquet") as tmp:
        tmp.write_bytes(b"new table")
    assert s.path("synthetic.parquet").read_bytes() == b"new table"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["measurements.json", "synthetic.parquet"]


def test_owner_only_writes_are_0600_and_keep_existing_keeps_the_first(tmp_path):
    path = tmp_path / "private" / "secret.key"
    assert atomic_write(path, b"first", 0o600, keep_existing=True)
    assert not atomic_write(path, b"second", 0o600, keep_existing=True)
    assert path.read_bytes() == b"first" and (path.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["secret.key"]
