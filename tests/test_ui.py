"""The Dagster UI in a real browser (headless Chromium driven by Selenium).

One module-scoped `dagster-webserver` serves two code locations (a workspace file): a throwaway
project (`example`: the repository's definitions.py on the bundled example, 3000 rows) and a host
project (`host`, below). The example group's whole pipeline and its checks are materialized through
the webserver's GraphQL API (the instance's DefaultRunCoordinator launches the run from the
webserver, no daemon needed); then the browser checks what a person would see: the lineage graph
of group `dp_synth` (dp-synth's default group) with its edges, the checks of `synthetic` passed, the public fidelity figures
on `synthetic` (numbers Dagster charts over runs), and the owner-only utility report showing only
where its files are (no figures, no plots: the event log is public).

The host location is a copy of tests/host_project/ (the host's own asset `raw_customers` writing a
DuckDB table, dp-synth added with the factory under `privacy/`), served after two syntheses on the
same instance (in the test's process, which has Dagster imported already), and the browser sees the
lineage from the host's asset through every dp-synth stage, and the charts Dagster draws over those
runs from the numbers dp-synth publishes: the budget on `synthetic` (its metadata plots), the
current budget on `budget` (observed by the budget sensor, ticked as the daemon ticks it, before and
after the limit is raised and the code location reloaded, with no run between) and a check's worst
TVD (the check's plots).

Needs chromium and chromedriver on PATH (`.ci/install-browser` installs Debian's); without them
the module is skipped. Screenshots go to tests/artifacts/ (ui.png, ui-checks.png,
ui-utility-report.png, ui-host-lineage.png, ui-budget-chart.png, ui-current-budget-chart.png,
ui-check-chart.png, and ui-failure-*.png when a wait times out).
"""

import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
import yaml

from tests.helpers import EXAMPLE_REPORT, REPO, dagster_env, make_project

HOST_PROJECT = REPO / "tests" / "host_project"
HOST_LINEAGE = ["raw_customers", "preprocessed", "marginals", "selection", "measurements",
                "model", "synthetic"]
HOST_SYNTHETIC = "/assets/privacy/customers/synthetic"
HOST_BUDGET = "/assets/privacy/customers/budget"
BUDGET_PLOTS = ["privacy/budget_used_share", "privacy/runs_left"]

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver") or next(
    (p for p in ("/usr/bin/chromedriver",) if os.access(p, os.X_OK)), None)
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("the UI test needs chromium and chromedriver (missing: "
                + ", ".join(n for n, p in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER))
                            if not p)
                + "); run .ci/install-browser to install them",
                allow_module_level=True)

from selenium import webdriver
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    ElementNotInteractableException,
    NoSuchElementException,
    StaleElementReferenceException,
    TimeoutException,
)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BIN = Path(sys.executable).parent
ARTIFACTS = REPO / "tests" / "artifacts"
GROUP = "dp_synth"  # dp-synth's default group (no key prefix)
DATASET = "example"
LINEAGE = ["source", "preprocessed", "marginals", "selection", "measurements", "model",
           "synthetic"]
CHECKS = ["schema", "domain", "row_count", "null_fraction", "one_way_tvd"]
REPORT_PATHS = {"report_html": "report.html", "report_json": "report.json",
                "histograms_png": "report_histograms.png",
                "tvd_heatmap_png": "report_tvd_heatmap.png"}
FIDELITY_FLOATS = ["fidelity/one_way_tvd_mean", "fidelity/one_way_tvd_max"]
# a busy 2-core machine: generous deadlines, every wait polls and returns as soon as it can
SERVER_TIMEOUT = 180
RUN_TIMEOUT = 600
QUEUED_TIMEOUT = 90
UI_TIMEOUT = 90
EXAMPLE_LOCATION, HOST_LOCATION = LOCATIONS = ("example", "host")

# DefaultRunCoordinator: the webserver launches runs itself (DefaultRunLauncher, a subprocess of
# the code server); the default QueuedRunCoordinator would leave them QUEUED without a daemon
DAGSTER_YAML = """\
telemetry:
  enabled: false
run_coordinator:
  module: dagster.core.run_coordinator
  class: DefaultRunCoordinator
"""

LAUNCH_RUN = """
mutation LaunchRun($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message stack }
    ... on InvalidSubsetError { message }
    ... on PipelineNotFoundError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidStepError { invalidStepKey }
    ... on InvalidOutputError { stepKey invalidOutputName }
    ... on RunConflict { message }
    ... on UnauthorizedError { message }
    ... on PresetNotFoundError { message }
    ... on ConflictingExecutionParamsError { message }
    ... on NoModeProvidedError { message }
  }
}"""

WORKSPACE = """
{ workspaceOrError { __typename
    ... on PythonError { message }
    ... on Workspace { locationEntries { name loadStatus locationOrLoadError { __typename
        ... on PythonError { message stack }
        ... on RepositoryLocation { repositories { name } } } } } } }"""

GROUP_NODES = """
query GroupNodes($group: AssetGroupSelector!) {
  assetNodes(group: $group) {
    assetKey { path } isExecutable dependencyKeys { path }
    assetChecksOrError { ... on AssetChecks { checks { name } } }
  }
}"""

OBSERVATIONS = """
query Observations($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) { ... on Asset { assetObservations(limit: 10) {
    metadataEntries { label ... on FloatMetadataEntry { floatValue } } } } }
}"""

RUN_STATUS = "query RunStatus($runId: ID!) { runOrError(runId: $runId) { __typename " \
             "... on Run { status } ... on RunNotFoundError { message } } }"

RUN_ERRORS = """
query RunErrors($runId: ID!) {
  logsForRun(runId: $runId, limit: 5000) {
    __typename
    ... on EventConnection { events { __typename
        ... on MessageEvent { message level stepKey }
        ... on ErrorEvent { error { message stack } } } }
    ... on PythonError { message }
  }
}"""

LATEST_METADATA = """
query LatestMetadata($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) { __typename
    ... on Asset { assetMaterializations(limit: 1) { runId metadataEntries { __typename label
      ... on PathMetadataEntry { path } ... on FloatMetadataEntry { floatValue } } } }
  }
}"""


# ---------------------------------------------------------------------------------- server

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """The webserver process and a minimal GraphQL client for it. `location` and `repository`
    name the example's code location."""

    def __init__(self, url: str, proc: subprocess.Popen, log: Path):
        self.url, self.proc, self.log = url, proc, log
        self.location = self.repository = None

    def log_tail(self, chars: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no webserver log)"

    def gql(self, query: str, variables: dict | None = None, timeout: float = 60) -> dict:
        request = urllib.request.Request(
            f"{self.url}/graphql", data=json.dumps({"query": query,
                                                   "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body = json.load(response)
        except urllib.error.HTTPError as e:
            raise AssertionError(f"GraphQL HTTP {e.code}: {e.read().decode(errors='replace')}")
        if body.get("errors"):
            raise AssertionError(f"GraphQL errors: {json.dumps(body['errors'])[:3000]}")
        return body["data"]

    def wait_until_loaded(self, timeout: float) -> None:
        """Until the GraphQL endpoint answers and every code location of the workspace has
        loaded."""
        deadline, last = time.monotonic() + timeout, "no answer yet"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"dagster-webserver exited with code {self.proc.returncode} before "
                            f"serving:\n{self.log_tail()}")
            try:
                workspace = self.gql(WORKSPACE, timeout=10)["workspaceOrError"]
            except (OSError, AssertionError) as e:     # not listening yet / still starting
                last = repr(e)
            else:
                entries = workspace.get("locationEntries") or []
                if {e["name"] for e in entries} == set(LOCATIONS) and all(
                        e["loadStatus"] == "LOADED" for e in entries):
                    for entry in entries:
                        location = entry["locationOrLoadError"]
                        if location["__typename"] != "RepositoryLocation":
                            pytest.fail(f"the code location {entry['name']} failed to load:\n"
                                        + (location or {}).get("message", json.dumps(location))
                                        + "".join((location or {}).get("stack") or [])[-3000:])
                        if entry["name"] == EXAMPLE_LOCATION:
                            self.location = entry["name"]
                            self.repository = location["repositories"][0]["name"]
                    return
                last = json.dumps(workspace)[:500]
            time.sleep(1)
        pytest.fail(f"dagster-webserver did not serve loaded code locations within {timeout}s "
                    f"(last: {last}):\n{self.log_tail()}")

    def group_nodes(self) -> list[SimpleNamespace]:
        nodes = self.gql(GROUP_NODES, {"group": {
            "groupName": GROUP, "repositoryName": self.repository,
            "repositoryLocationName": self.location}})["assetNodes"]
        return [SimpleNamespace(
            path=n["assetKey"]["path"], executable=n["isExecutable"],
            deps=[d["path"] for d in n["dependencyKeys"]],
            checks=[c["name"] for c in (n["assetChecksOrError"] or {}).get("checks", [])])
            for n in nodes]

    def run_errors(self, run_id: str) -> str:
        logs = self.gql(RUN_ERRORS, {"runId": run_id})["logsForRun"]
        lines = []
        for event in logs.get("events") or []:
            error = event.get("error")
            if error or event.get("level") in ("ERROR", "CRITICAL") \
                    or event["__typename"].endswith("FailureEvent"):
                lines.append(f"[{event['__typename']} {event.get('stepKey') or ''}] "
                             f"{event.get('message') or ''}")
                if error:
                    lines.append(error["message"] + "".join(error.get("stack") or [])[-2000:])
        return "\n".join(lines) or json.dumps(logs)[:3000]


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group (webserver, code server, run workers), then SIGKILL
    whatever is left of it."""
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


def serve(workspace: Path, cwd: Path, env: dict, log: Path):
    """A dagster-webserver on the `workspace` file, loaded, as a Server (a generator: stopped
    after)."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(BIN / "dagster-webserver"), "-w", str(workspace),
             "-h", "127.0.0.1", "-p", str(port)],
            cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)     # its own process group, killed whole at teardown
    try:
        srv = Server(f"http://127.0.0.1:{port}", proc, log)
        srv.wait_until_loaded(SERVER_TIMEOUT)
        # no "Join the Dagster community" dialog over the pages (shown on localhost origins)
        srv.gql("mutation { setNuxSeen }")
        yield srv
    finally:
        stop(proc)


def workspace_file(path: Path, locations: dict[str, Path]) -> Path:
    """A workspace file loading each name -> definitions file as a code location of that name,
    run from the file's folder."""
    path.write_text(yaml.safe_dump({"load_from": [
        {"python_file": {"relative_path": str(definitions), "attribute": "defs",
                         "working_directory": str(definitions.parent), "location_name": name}}
        for name, definitions in locations.items()]}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One webserver, one instance, two code locations: the example project (its DP_SYNTH_*
    paths in the webserver's environment) and the host project (a copy) after two runs of
    `raw_customers*` (the host's asset, dp-synth's stages and their checks; its limit covers
    two runs) and two observations of its budget."""
    root = tmp_path_factory.mktemp("ui")
    project = make_project(root / "project", rows=3000, report=EXAMPLE_REPORT)
    home = root / "dagster_home"
    env = dagster_env(project, home, DAGSTER_YAML)

    host = root / "host"
    shutil.copytree(HOST_PROJECT, host, ignore=shutil.ignore_patterns("__pycache__"))
    synthesize_host(host, home, runs=2)
    observe_budget(host, home)

    workspace = workspace_file(root / "workspace.yaml", {
        EXAMPLE_LOCATION: REPO / "definitions.py", HOST_LOCATION: host / "definitions.py"})
    yield from serve(workspace, REPO, env, root / "webserver.log")


@pytest.fixture(scope="module")
def host_server(server):
    """The same webserver: the host's pages are found by their asset keys (`privacy/...`)."""
    return server


def synthesize_host(host: Path, home: Path, runs: int) -> None:
    """`runs` runs of the host's `raw_customers` and everything downstream of it (dp-synth's
    stages, with their checks) on the instance at `home`, from the host's definitions.py (which
    names every path it uses from its own folder), in this process."""
    import importlib.util

    loader = importlib.util.spec_from_file_location("ui_host_definitions", host / "definitions.py")
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    defs = module.defs
    selection = dg.AssetSelection.assets(dg.AssetKey("raw_customers")).downstream()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        for _ in range(runs):
            result = dg.materialize([*defs.assets, *defs.asset_checks], resources=defs.resources,
                                    instance=instance, selection=selection,
                                    raise_on_error=False)
            failures = [e.step_failure_data.error.to_string()[-3000:] for e in result.all_events
                        if e.is_step_failure and e.step_failure_data.error is not None]
            assert result.success, failures
            assert {e.check_name for e in result.get_asset_check_evaluations()}, \
                "the host's runs evaluated no check"


def observe_budget(host: Path, home: Path) -> None:
    """Two observations of the host's `budget` asset, as the daemon ticks `privacy_budget`:
    after the two runs, and after the limit was raised in datasets.yaml and the code location
    reloaded (no run in between)."""
    from tests.test_current_budget import Daemon

    with dg.DagsterInstance.from_config(str(home)) as instance:
        daemon = Daemon(instance, host / "definitions.py", sensor="privacy_budget")
        try:
            daemon.tick()
            datasets = host / "datasets.yaml"
            registry = yaml.safe_load(datasets.read_text())
            registry["datasets"]["customers"]["privacy"]["limit"]["epsilon"] *= 2
            datasets.write_text(yaml.safe_dump(registry, sort_keys=False))
            daemon.reload()
            daemon.tick()
        finally:
            daemon.close()


@pytest.fixture(scope="module")
def materialized(server):
    """The example group's assets (the observable source included) and all their checks, in one
    run of the implicit asset job, launched through GraphQL; returns the run id once it
    succeeded."""
    nodes = server.group_nodes()
    assert nodes, f"no assets in group {GROUP!r}"
    params = {"selector": {
        "repositoryLocationName": server.location,
        "repositoryName": server.repository,
        "jobName": "__ASSET_JOB",
        "assetSelection": [{"path": n.path} for n in nodes if n.executable],
        "assetCheckSelection": [{"assetKey": {"path": n.path}, "name": c}
                                for n in nodes if n.executable for c in n.checks],
    }, "runConfigData": {}}
    launched = server.gql(LAUNCH_RUN, {"executionParams": params})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", f"launchRun: {json.dumps(launched)}"
    run_id = launched["run"]["runId"]

    started = time.monotonic()
    status = launched["run"]["status"]
    while status not in ("SUCCESS", "FAILURE", "CANCELED"):
        waited = time.monotonic() - started
        if status == "QUEUED" and waited > QUEUED_TIMEOUT:
            pytest.fail(f"run {run_id} stayed QUEUED for {QUEUED_TIMEOUT}s: nothing dequeues it "
                        "(is the instance's run_coordinator DefaultRunCoordinator?)")
        if waited > RUN_TIMEOUT:
            pytest.fail(f"run {run_id} still {status} after {RUN_TIMEOUT}s\n"
                        f"{server.run_errors(run_id)}\n{server.log_tail()}")
        time.sleep(2)
        status = server.gql(RUN_STATUS, {"runId": run_id})["runOrError"].get("status")
    if status != "SUCCESS":
        pytest.fail(f"run {run_id} ended {status}:\n{server.run_errors(run_id)}")
    return run_id


# --------------------------------------------------------------------------------- browser

@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1600,1000",
                "--disable-dev-shm-usage"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    return path


def wait_for(driver, condition, what: str, timeout: float = UI_TIMEOUT):
    """WebDriverWait for `condition(driver)` to return something truthy; on timeout, a
    screenshot and the page's text go into the failure (`condition.last`, if the condition
    sets it, says what it saw last)."""
    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.5, ignored_exceptions=(
            NoSuchElementException, StaleElementReferenceException,
            ElementClickInterceptedException, ElementNotInteractableException)).until(condition)
    except TimeoutException:
        slug = "".join(c if c.isalnum() else "-" for c in what)[:60].strip("-")
        shot = screenshot(driver, f"ui-failure-{slug}.png")
        try:
            text = driver.find_element(By.TAG_NAME, "body").text[:2000]
        except Exception as e:  # noqa: BLE001 - the failure message is what matters here
            text = repr(e)
        seen = getattr(condition, "last", None)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} at "
                             f"{driver.current_url}\nlast seen: {seen}\nscreenshot: {shot}\n"
                             f"page text:\n{text}") from None


# The asset graph is an <svg> with one <foreignObject> per asset node (its name as a text leaf or
# a title attribute) and one <path marker-end=arrow> per edge. Returns, in client pixels, each
# named node's box and each edge's first and last point.
GRAPH_JS = """
const names = arguments[0];
const boxes = {};
for (const fo of document.querySelectorAll('svg foreignObject')) {
  const labels = new Set();
  for (const el of fo.querySelectorAll('*')) {
    const title = el.getAttribute('title');
    if (title) labels.add(title.trim());
    if (el.childElementCount === 0) labels.add(el.textContent.trim());
  }
  const r = fo.getBoundingClientRect();
  for (const name of names) {
    if (labels.has(name) && !(name in boxes) && r.width > 0 && r.height > 0) {
      boxes[name] = [r.left, r.top, r.right, r.bottom];
    }
  }
}
const edges = [];
for (const path of document.querySelectorAll('svg path[marker-end]')) {
  const ctm = path.getScreenCTM();
  const length = path.getTotalLength();
  if (!ctm || !length) continue;
  const a = path.getPointAtLength(0).matrixTransform(ctm);
  const b = path.getPointAtLength(length).matrixTransform(ctm);
  edges.push([a.x, a.y, b.x, b.y]);
}
return {boxes: boxes, edges: edges};
"""


def near(box, x: float, y: float) -> bool:
    left, top, right, bottom = box
    tol = 0.1 * min(right - left, bottom - top) + 2
    return left - tol <= x <= right + tol and top - tol <= y <= bottom + tol


def graph_drawn(names: set[str], deps: set[tuple[str, str]]):
    """Condition: every asset in `names` is a node, and every (upstream, downstream) pair in
    `deps` is an edge leaving the upstream node's box and ending at the downstream node's."""
    def condition(driver):
        state = driver.execute_script(GRAPH_JS, sorted(names))
        boxes, edges = state["boxes"], state["edges"]
        missing = sorted(names - set(boxes))
        undrawn = sorted(
            (up, down) for up, down in deps
            if up not in boxes or down not in boxes or not any(
                near(boxes[up], x0, y0) and near(boxes[down], x1, y1)
                for x0, y0, x1, y1 in edges))
        condition.last = {"missing nodes": missing, "undrawn edges": undrawn,
                          "edges on the page": len(edges)}
        return state if not missing and not undrawn else False
    condition.last = None
    return condition


def check_rows(names: list[str]):
    """Condition: each check in the asset's Checks list shows "Succeeded" (the list's row is the
    parent of the element titled with the check's name)."""
    def condition(driver):
        status = {}
        for name in names:
            rows = driver.find_elements(By.XPATH, f"//*[@title='{name}']/..")
            status[name] = [r.text.replace("\n", " ") for r in rows]
        condition.last = status
        ok = all(any("Succeeded" in text for text in texts) for texts in status.values())
        return status if ok else False
    condition.last = None
    return condition


def row_shows(key: str, text: str):
    """Condition: the metadata table has a row labelled `key` whose text contains `text`."""
    def condition(driver):
        rows = driver.find_elements(By.XPATH, f"//tr[td[1][normalize-space()='{key}']]")
        condition.last = [r.text[:300] for r in rows]
        return any(text in r.text for r in rows)
    condition.last = None
    return condition


def click(driver, xpath: str, what: str) -> None:
    wait_for(driver, lambda d: d.find_element(By.XPATH, xpath).click() or True, what)


# ----------------------------------------------------------------------------------- tests

def test_lineage_graph_and_checks_of_synthetic(server, materialized, browser):
    nodes = server.group_nodes()
    names = {n.path[-1] for n in nodes}
    assert set(LINEAGE) <= names, f"group {GROUP!r} has {sorted(names)}"
    shown = set(LINEAGE) | ({"utility_report"} & names)
    deps = {(d[-1], n.path[-1]) for n in nodes for d in n.deps if d[-1] in shown
            and n.path[-1] in shown}
    assert set(itertools.pairwise(LINEAGE)) <= deps, f"the pipeline's dependencies: {sorted(deps)}"

    # the group's page in the example's code location (the workspace has two)
    location = f"{server.repository}@{server.location}"
    browser.get(f"{server.url}/locations/{location}/asset-groups/{GROUP}")
    wait_for(browser, graph_drawn(shown, deps),
             f"the asset graph of group {GROUP!r}: nodes {sorted(shown)} and their edges")
    screenshot(browser, "ui.png")

    browser.get(f"{server.url}/assets/{DATASET}/synthetic")
    click(browser, "//a[@role='tab'][normalize-space()='Checks']", "the Checks tab of synthetic")
    expected = next(n.checks for n in nodes if n.path[-1] == "synthetic")
    assert set(CHECKS) <= set(expected), f"checks on synthetic: {expected}"
    wait_for(browser, check_rows(CHECKS), f"checks {CHECKS} of synthetic shown as Succeeded")
    screenshot(browser, "ui-checks.png")


def latest_entries(server, stage: str, run_id: str) -> dict:
    latest = server.gql(LATEST_METADATA, {"key": {"path": [DATASET, stage]}})[
        "assetOrError"].get("assetMaterializations") or []
    assert latest and latest[0]["runId"] == run_id, \
        f"[{DATASET}, {stage}] was not materialized by run {run_id}: {latest}"
    return {e["label"]: e for e in latest[0]["metadataEntries"]}


def test_synthetic_publishes_fidelity_figures_to_chart(server, materialized):
    entries = latest_entries(server, "synthetic", materialized)
    for key in FIDELITY_FLOATS:
        assert entries.get(key, {}).get("__typename") == "FloatMetadataEntry", \
            f"[{DATASET}, synthetic] lacks the float {key} (it has {sorted(entries)})"
        assert 0.0 <= entries[key]["floatValue"] <= 1.0


def test_utility_report_shows_only_where_its_files_are(server, materialized, browser):
    names = {n.path[-1] for n in server.group_nodes()}
    if "utility_report" not in names:
        pytest.fail(f"no [{DATASET}, utility_report] asset in group {GROUP!r} ({sorted(names)})")
    entries = latest_entries(server, "utility_report", materialized)
    kinds = {label: e["__typename"] for label, e in entries.items()}
    assert kinds == dict.fromkeys(REPORT_PATHS, "PathMetadataEntry"), \
        f"[{DATASET}, utility_report]'s metadata should be the paths of its files only: {kinds}"
    for key, name in REPORT_PATHS.items():
        assert entries[key]["path"].endswith(f"/private/{DATASET}/{name}"), entries[key]

    browser.get(f"{server.url}/assets/{DATASET}/utility_report")
    for key, name in REPORT_PATHS.items():
        wait_for(browser, row_shows(key, name),
                 f"utility_report's metadata row {key} showing the path of {name}")
    assert not browser.find_elements(By.CSS_SELECTOR, "img[src^='data:image/png']"), \
        "the utility report's page shows an inline image: its plots must stay in the private zone"
    screenshot(browser, "ui-utility-report.png")


def plots_drawn(titles: list[str]):
    """Condition: a chart (a <canvas>) is drawn under each of `titles` (the plot's heading);
    returns the first title's element."""
    def condition(driver):
        found = {}
        for title in titles:
            heads = driver.find_elements(By.XPATH, f"//*[normalize-space(text())='{title}']")
            found[title] = any(h.find_elements(By.XPATH, "following::canvas[1]") for h in heads)
        condition.last = found
        return driver.find_element(By.XPATH, f"//*[normalize-space(text())='{titles[0]}']") \
            if all(found.values()) else False
    condition.last = None
    return condition


def test_host_lineage_runs_from_the_host_asset_through_dp_synth(host_server, browser):
    browser.get(f"{host_server.url}{HOST_SYNTHETIC}?view=lineage&lineageScope=upstream"
                "&lineageDepth=10")
    wait_for(browser, graph_drawn(set(HOST_LINEAGE), set(itertools.pairwise(HOST_LINEAGE))),
             f"the upstream lineage of privacy/customers/synthetic: {HOST_LINEAGE}")
    screenshot(browser, "ui-host-lineage.png")


def test_the_budget_and_a_check_are_charted_over_runs(host_server, browser):
    browser.get(f"{host_server.url}{HOST_SYNTHETIC}?view=overview")
    click(browser, "//button[.//*[normalize-space(text())='Plots']]",
          "the Plots toggle of synthetic's metadata")
    first = wait_for(browser, plots_drawn(BUDGET_PLOTS),
                     f"charts of {BUDGET_PLOTS} on synthetic's overview")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", first)
    screenshot(browser, "ui-budget-chart.png")

    browser.get(f"{host_server.url}{HOST_BUDGET}?view=overview")
    click(browser, "//button[.//*[normalize-space(text())='Plots']]",
          "the Plots toggle of budget's metadata")
    first = wait_for(browser, plots_drawn(["privacy/epsilon_limit", "privacy/runs_left"]),
                     "charts of the observed epsilon_limit and runs_left on budget's overview")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start'});", first)
    screenshot(browser, "ui-current-budget-chart.png")
    observed = host_server.gql(OBSERVATIONS, {"key": {"path": ["privacy", "customers",
                                                               "budget"]}})
    limits = [e["floatValue"] for o in observed["assetOrError"]["assetObservations"]
              for e in o["metadataEntries"] if e["label"] == "privacy/epsilon_limit"]
    assert len(limits) == 2 and limits[0] == pytest.approx(2 * limits[1], rel=1e-2), limits

    browser.get(f"{host_server.url}{HOST_SYNTHETIC}?view=checks&checkDetail=one_way_tvd")
    first = wait_for(browser, plots_drawn(["max_tvd", "max_tvd_ratio", "max_tvd_tolerance"]),
                     "charts of one_way_tvd's max_tvd, max_tvd_ratio and max_tvd_tolerance")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", first)
    screenshot(browser, "ui-check-chart.png")
