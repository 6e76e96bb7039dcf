"""The HTML pages (report --html, show --html, diff --html), as a user sees
them: loaded in headless Chromium (driven over the DevTools pipe, see
tests/_browser.py), with no console error, no exception and no request, and
showing exactly the arrays, sizes and lines of a script recorded for real.

Without chromium on PATH the browser tests are skipped (CI installs it); the
checks on the file itself (escaping, size, downsampling) always run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from _browser import Browser, chromium
from conftest import REPO, cpu_env, line_of, run_cli, write_script

from jaxmemprof.units import format_bytes
from jaxmemprof.analysis.attributed import attribute

needs_browser = pytest.mark.skipif(chromium() is None, reason="chromium is not installed (CI installs it: .ci/run)")

KIB, MIB = 1024, 1024**2
A_BYTES = 512 * 128 * 4  # 256 KiB
LEAK_BYTES = 64 * 64 * 4  # 16 KiB per step, 3 steps
BIG_BYTES = 1024 * 256 * 4  # 1 MiB
DOUBLE_BYTES = A_BYTES  # the jitted function's output

KNOWN = '''
import jax
import jax.numpy as jnp
import jaxmemprof


@jax.jit
def double(x):
    return x * 2.0


def make_big():
    return jnp.ones((1024, 256), jnp.float32)  # SITE-BIG


def main():
    keep = []
    a = jnp.zeros((512, 128), jnp.float32)  # SITE-A
    d = double(a)  # SITE-DOUBLE
    jaxmemprof.snapshot("setup")
    for i in range(3):
        keep.append(jnp.full((64, 64), i, jnp.int32))  # SITE-LEAK
        jaxmemprof.mark(f"step {i}")
        jaxmemprof.snapshot(f"step {i}")
    b = make_big()
    jaxmemprof.snapshot("big")
    del b
    jaxmemprof.snapshot("after")
    return a, d, keep


main()
'''


def site(script: Path, marker: str, function: str) -> str:
    return f"{script.name}:{line_of(script, marker)} ({function})"


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    d = tmp_path_factory.mktemp("known")
    script = write_script(d, "known.py", KNOWN)
    run_cli("run", "-q", "--interval", "100000", "-o", "run", script.name, cwd=d, check=0)
    run_cli("report", "run", "--html", "report.html", cwd=d, check=0)
    return d, script


@pytest.fixture(scope="module")
def browser():
    if chromium() is None:
        pytest.skip("chromium is not installed (CI installs it: .ci/run)")
    with Browser() as b:
        yield b


def open_page(browser, path):
    page = browser.open(path)
    assert page.evaluate("document.documentElement.dataset.jmpReady") == "1"
    assert page.evaluate("document.documentElement.getAttribute('data-jmp-errors')") is None, \
        page.evaluate("document.getElementById('jmp-errors').textContent")
    assert page.errors == []
    return page


def nodes(page, svg_id: str) -> dict:
    """Flame graph bars by frame name: their bytes (and base, delta)."""
    return page.evaluate(f"""Array.from(document.querySelectorAll('#{svg_id} g.fnode')).map(g => [
        g.dataset.name, Number(g.dataset.bytes), Number(g.dataset.base || 0), Number(g.dataset.delta || 0)])""")


def by_name(rows):
    return {r[0]: r[1:] for r in rows}


def set_select(page, sel_id: str, value) -> None:
    page.evaluate(f"""(() => {{ const s = document.getElementById('{sel_id}'); s.value = '{value}';
        s.dispatchEvent(new Event('change')); }})()""")


# -- the report page ---------------------------------------------------------------------


@needs_browser
def test_report_headline_says_when_it_peaked_which_lines_held_it_and_what_grew(known, browser):
    d, script = known
    page = open_page(browser, d / "report.html")
    peak = A_BYTES + DOUBLE_BYTES + 3 * LEAK_BYTES + BIG_BYTES
    text = page.evaluate("document.getElementById('jmp-peak').innerText")
    assert format_bytes(peak) == "1.55 MiB" and "1.55 MiB" in text
    snaps = json.loads(run_cli("report", "run", "--json", cwd=d, check=0).stdout)["timeline"]
    peak_row = next(s for s in snaps if s["label"] == "big")
    assert peak_row["live_bytes"] == peak
    assert f"(snapshot {peak_row['snapshot']})" in text
    held = page.evaluate("Array.from(document.querySelectorAll('#jmp-held li')).map(li => li.innerText)")
    expect = [(BIG_BYTES, "1.00 MiB", site(script, "SITE-BIG", "make_big")),
              (A_BYTES, "256.00 KiB", site(script, "SITE-A", "main")),
              (DOUBLE_BYTES, "256.00 KiB", site(script, "SITE-DOUBLE", "main")),
              (3 * LEAK_BYTES, "48.00 KiB", site(script, "SITE-LEAK", "main"))]
    assert len(held) == 4
    for (nbytes, shown, where), line in zip(expect, sorted(held, key=lambda x: -float(x.split()[0]) * (
            MIB if "MiB" in x.split()[1] else KIB))):
        assert shown in line and where in line and f"{nbytes / peak:.1%}" in line
    # Beside each line, the Python reference that held its arrays at the peak: main's locals.
    holders = {"SITE-BIG": "b", "SITE-A": "a", "SITE-DOUBLE": "d", "SITE-LEAK": "keep[…]"}
    for marker, function in (("SITE-BIG", "make_big"), ("SITE-A", "main"), ("SITE-DOUBLE", "main"),
                             ("SITE-LEAK", "main")):
        (line,) = [h for h in held if site(script, marker, function) in h]
        assert f"kept alive by {holders[marker]} (local of main)" in line, line
    grew = page.evaluate("document.getElementById('jmp-grew').innerText")
    # first -> final ("after", the last before the exit snapshot): the big array was freed
    assert "+48.00 KiB" in grew and site(script, "SITE-LEAK", "main") in grew
    assert site(script, "SITE-BIG", "make_big") not in grew


@needs_browser
def test_the_bundled_runs_page_leads_with_each_peak_labelled_and_cards_that_link_their_findings(tmp_path, browser):
    """The bundled MLP's page: a true peak tile and a live peak tile, each
    with the figure and the label the terminal report prints (one labelled
    figure per peak; the chart's lines say which peak they are), and each
    "What to change" card names its line and saving and links to its finding."""
    run = REPO / "sample_runs" / "runs" / "mlp-no-donation"
    assert run_cli("report", run, "--html", tmp_path / "page.html", cwd=tmp_path).returncode == 0
    text = run_cli("report", run, cwd=tmp_path, env=cpu_env(COLUMNS="1000")).stdout.splitlines()
    true_line = next(line for line in text if line.startswith("true peak "))
    live_line = next(line for line in text if line.startswith("live peak "))
    page = open_page(browser, tmp_path / "page.html")
    tiles = page.evaluate("Array.from(document.querySelectorAll('#headline .tile h3')).map(h => h.textContent)")
    assert tiles[:2] == ["True peak", "Live peak"], tiles
    true_tile = page.evaluate("document.getElementById('jmp-true-peak').innerText")
    live_tile = page.evaluate("document.getElementById('jmp-peak').innerText")
    assert true_line in true_tile, true_tile
    assert page.evaluate("document.querySelector('#jmp-true-peak p.big').textContent") == "38.23 MiB"
    assert page.evaluate("document.querySelector('#jmp-peak p.big').textContent") == "14.14 MiB"
    assert live_line in live_tile, live_tile
    assert "new state" in true_tile and "inside the call" in true_tile  # what it is
    # the chart's lines are labelled with the peak they are
    assert page.evaluate("document.getElementById('jmp-peak-label').textContent").startswith("live peak 14.14 MiB")
    labels = page.evaluate("Array.from(document.querySelectorAll('#jmp-timeline text.label')).map(t => t.textContent)")
    assert any(x.startswith("true peak ") for x in labels), labels
    cards = page.evaluate("""Array.from(document.querySelectorAll('#jmp-change li')).map(li => {
        const a = li.querySelector('a.card-link'); const target = document.querySelector(a.getAttribute('href'));
        return [a.innerText, li.innerText, target ? target.dataset.rule : null]; })""")
    doc = json.loads(run_cli("report", run, "--json", cwd=tmp_path).stdout)
    assert len(cards) == min(4, len(doc["findings"])) and cards
    for (link, card, rule), f in zip(cards, doc["findings"]):
        assert link.split(". ", 1)[1] == rule == f["rule"]
        assert (f["site"] or "") in card and (f["saves"] or "") in card


@needs_browser
def test_timeline_stacks_the_sites_marks_the_peak_and_the_markers(known, browser):
    d, script = known
    page = open_page(browser, d / "report.html")
    areas = page.evaluate("Array.from(document.querySelectorAll('#jmp-timeline path.area')).map(p => p.dataset.site)")
    for marker, fn in (("SITE-BIG", "make_big"), ("SITE-A", "main"), ("SITE-DOUBLE", "main"), ("SITE-LEAK", "main")):
        assert site(script, marker, fn) in areas
    assert "other" not in areas
    assert page.evaluate("document.querySelectorAll('#jmp-timeline line.marker').length") == 3
    label = page.evaluate("document.getElementById('jmp-peak-label').textContent")
    assert label.startswith("live peak 1.55 MiB at ")
    legend = page.evaluate("document.getElementById('jmp-legend').innerText")
    assert "peak 1.00 MiB" in legend and "peak 48.00 KiB" in legend


@needs_browser
def test_flame_graph_of_the_peak_and_of_a_snapshot_picked_on_the_timeline(known, browser):
    d, script = known
    page = open_page(browser, d / "report.html")
    big, leak = site(script, "SITE-BIG", "make_big"), site(script, "SITE-LEAK", "main")
    flame = by_name(nodes(page, "jmp-flame"))
    assert flame[big][0] == BIG_BYTES and flame[leak][0] == 3 * LEAK_BYTES
    assert flame["all"][0] == A_BYTES + DOUBLE_BYTES + 3 * LEAK_BYTES + BIG_BYTES
    # any snapshot, from the picker: "step 0" held a, d and one leak array
    options = page.evaluate("Array.from(document.getElementById('jmp-selected').options).map(o => [o.value, o.text])")
    step0 = next(v for v, t in options if "'step 0'" in t)
    set_select(page, "jmp-selected", step0)
    flame = by_name(nodes(page, "jmp-flame"))
    assert flame["all"][0] == A_BYTES + DOUBLE_BYTES + LEAK_BYTES and big not in flame
    # a click on the timeline at the peak's moment selects the peak again
    page.evaluate("""(() => {
        const svg = document.getElementById('jmp-timeline'), r = svg.getBoundingClientRect();
        const c = svg.querySelector('circle.peak'), hit = svg.querySelector('rect.hit');
        hit.dispatchEvent(new MouseEvent('click', {bubbles: true, clientX: r.left + Number(c.getAttribute('cx')),
                                                   clientY: r.top + 100}));
    })()""")
    flame = by_name(nodes(page, "jmp-flame"))
    assert flame[big][0] == BIG_BYTES
    assert "peak" in page.evaluate("(s => s.options[s.selectedIndex].text)(document.getElementById('jmp-selected'))")
    # hover: bytes, buffers, shapes and dtypes
    page.evaluate(f"""(() => {{ const g = Array.from(document.querySelectorAll('#jmp-flame g.fnode'))
        .find(g => g.dataset.name === {json.dumps(big)});
        g.dispatchEvent(new MouseEvent('mousemove', {{bubbles: true, clientX: 50, clientY: 50}})); }})()""")
    tip = page.evaluate("document.querySelector('.tip').innerText")
    assert "1.00 MiB" in tip and "1 buffer" in tip and "float32[1024,256] \u00d71" in tip and "your code" in tip


@needs_browser
def test_flame_graph_search_and_library_frames(known, browser):
    d, script = known
    page = open_page(browser, d / "report.html")
    user_only = nodes(page, "jmp-flame")
    page.evaluate("""(() => { const i = document.getElementById('jmp-search'); i.value = 'make_big';
        i.dispatchEvent(new Event('input')); })()""")
    matched = page.evaluate("Array.from(document.querySelectorAll('#jmp-flame g.fnode.match')).map(g => g.dataset.name)")
    assert matched == [site(script, "SITE-BIG", "make_big")]
    assert "search: 1.00 MiB match" in page.evaluate("document.querySelector('#flame .flame-info').textContent")
    # a click zooms into a bar: it spans the graph, its ancestors above it, nothing beside it
    page.evaluate(f"""(() => {{ const g = Array.from(document.querySelectorAll('#jmp-flame g.fnode'))
        .find(g => g.dataset.name === {json.dumps(site(script, "SITE-BIG", "make_big"))});
        g.dispatchEvent(new MouseEvent('click', {{bubbles: true}})); }})()""")
    zoomed = page.evaluate("""Array.from(document.querySelectorAll('#jmp-flame g.fnode')).map(g => [g.dataset.name,
        g.classList.contains('ancestor'), Number(g.querySelector('rect').getAttribute('width'))])""")
    width = page.evaluate("Number(document.getElementById('jmp-flame').getAttribute('width'))")
    focus = [z for z in zoomed if z[0] == site(script, "SITE-BIG", "make_big")]
    assert len(focus) == 1 and not focus[0][1] and focus[0][2] == pytest.approx(width - 0.5)
    assert all(z[1] for z in zoomed if z[0] != focus[0][0])  # only its ancestors are left
    assert "zoomed" in page.evaluate("document.querySelector('#flame .flame-info').textContent")
    page.evaluate("document.getElementById('jmp-lib').click()")
    with_lib = nodes(page, "jmp-flame")
    assert len(with_lib) > len(user_only)
    assert any("jax" in name for name, *_ in with_lib)
    assert by_name(with_lib)["all"][0] == by_name(user_only)["all"][0]


@needs_browser
def test_differential_flame_graph_first_to_final_and_any_two(known, browser):
    d, script = known
    page = open_page(browser, d / "report.html")
    leak, big = site(script, "SITE-LEAK", "main"), site(script, "SITE-BIG", "make_big")
    diff = by_name(nodes(page, "jmp-diff"))
    # first ("first", before any array) -> final ("after")
    assert diff[leak] == [3 * LEAK_BYTES, 0, 3 * LEAK_BYTES]
    assert big not in diff
    options = page.evaluate("Array.from(document.getElementById('jmp-new').options).map(o => [o.value, o.text])")
    set_select(page, "jmp-base", next(v for v, t in options if "'step 0'" in t))
    set_select(page, "jmp-new", next(v for v, t in options if "'big'" in t))
    diff = by_name(nodes(page, "jmp-diff"))
    assert diff[leak] == [3 * LEAK_BYTES, LEAK_BYTES, 2 * LEAK_BYTES]
    assert diff[big] == [BIG_BYTES, 0, BIG_BYTES]
    assert diff["all"][2] == 2 * LEAK_BYTES + BIG_BYTES
    # with "a click sets: the diff's base", a click on the timeline at the peak makes the peak the base
    page.evaluate("document.querySelector('input[name=jmp-click][value=base]').click()")
    page.evaluate("""(() => {
        const svg = document.getElementById('jmp-timeline'), r = svg.getBoundingClientRect();
        const c = svg.querySelector('circle.peak'), hit = svg.querySelector('rect.hit');
        hit.dispatchEvent(new MouseEvent('click', {bubbles: true, clientX: r.left + Number(c.getAttribute('cx')),
                                                   clientY: r.top + 100}));
    })()""")
    assert "'big'" in page.evaluate("(s => s.options[s.selectedIndex].text)(document.getElementById('jmp-base'))")
    diff = by_name(nodes(page, "jmp-diff"))
    assert diff["all"][2] == 0 and diff[big] == [BIG_BYTES, BIG_BYTES, 0]


@needs_browser
def test_lifetimes_jit_and_findings_sections(known, browser):
    d, script = known
    page = open_page(browser, d / "report.html")
    bars = page.evaluate("Array.from(document.querySelectorAll('#jmp-lifetimes rect.lt-bar')).map(r => [r.dataset.site, Number(r.dataset.bytes)])")
    assert [site(script, "SITE-BIG", "make_big"), BIG_BYTES] in bars
    assert sum(1 for s, b in bars if s == site(script, "SITE-LEAK", "main") and b == LEAK_BYTES) == 3
    jit = page.evaluate("document.getElementById('jmp-jit-memory').innerText")
    assert "double" in jit and f"known.py:{line_of(script, '@jax.jit')}" in jit and "256.00 KiB" in jit
    by_line = page.evaluate("document.getElementById('jmp-jit-peak').innerText")
    assert f"known.py:{line_of(script, 'return x * 2.0')} (double)" in by_line
    assert page.evaluate("document.getElementById('jmp-findings') !== null")


# -- what the memory is: role -> owner path ---------------------------------------------

# tests/test_roles.py's optax step (sizes known), with one more parameter whose dict key is hostile:
# it holds '.', '[', ']' and quotes (one path part all the same) and markup.
ROLE_KEY = "a.b['c'] </script><img src=x onerror=alert(3)> &amp;"
ROLES_STEP = f"""
import jax, jax.numpy as jnp, optax
params = {{"w1": jnp.zeros((256, 512)), "b1": jnp.zeros((512,)), "w2": jnp.zeros((512, 10)),
          {ROLE_KEY!r}: jnp.zeros((32, 32))}}
opt = optax.adam(1e-3)
opt_state = opt.init(params)

def loss_fn(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"])
    return optax.softmax_cross_entropy_with_integer_labels(h @ params["w2"], y).mean() + params[{ROLE_KEY!r}].sum()

@jax.jit
def step(params, opt_state, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

y = jnp.zeros((64,), jnp.int32)
for i in range(4):
    x = jnp.ones((64, 256)) * i  # a new batch every step
    params, opt_state, loss = step(params, opt_state, x, y)
print(float(loss))
"""
ROLE_P = (256 * 512 + 512 + 512 * 10 + 32 * 32) * 4  # the parameters
ROLE_ADAM = 2 * ROLE_P + 4  # mu, nu and the step count
ROLE_X = 64 * 256 * 4  # the batch


@pytest.fixture(scope="module")
def optax_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("roles_html")
    write_script(d, "train.py", ROLES_STEP)
    run_cli("run", "-q", "-o", "run", "train.py", cwd=d, check=0)
    run_cli("report", "run", "--html", "report.html", cwd=d, check=0)
    from jaxmemprof.analysis.roles import roles
    from jaxmemprof.store.reader import load_run

    return d, roles(attribute(load_run(d / "run")))


def role_cells_drawn(page) -> list:
    """The icicle's cells: name, path, bytes, and the rendered box (x, y, width)."""
    return page.evaluate("""Array.from(document.querySelectorAll('#jmp-roles-0 g.fnode')).map(g => {
        const r = g.querySelector('rect').getBoundingClientRect();
        return {name: g.dataset.name, path: g.dataset.path || '', bytes: Number(g.dataset.bytes),
                x: r.left, y: r.top, w: r.width}; })""")


@needs_browser
def test_what_the_memory_is_icicle_widths_are_the_roles_bytes(optax_run, browser):
    d, what = optax_run
    by_role = dict(zip(what.by_role["role"], what.by_role["bytes"].astype(int)))
    # the report's roles are the program's known sizes, and add up to the call's peak
    assert (by_role["parameters"], by_role["optimizer state"], by_role["batch"]) == (ROLE_P, ROLE_ADAM, ROLE_X)
    total = sum(by_role.values())
    assert total == what.peak_bytes
    page = open_page(browser, d / "report.html")
    assert page.evaluate("document.querySelectorAll('#roles svg.flame').length") == 1
    cells = role_cells_drawn(page)
    root = cells[0]
    assert root["name"] == "all" and root["bytes"] == total
    roles = {c["name"]: c for c in cells if c["y"] == root["y"] + 18}  # the row under the top one
    drawn = {r: b for r, b in by_role.items() if b / total * root["w"] >= 1}
    assert {"parameters", "optimizer state", "batch", "new state"} <= set(drawn) == set(roles)
    for role, b in drawn.items():
        assert roles[role]["bytes"] == b
        # a cell is drawn 0.5 px narrower than its share, leaving a gap between neighbours
        assert roles[role]["w"] + 0.5 == pytest.approx((root["w"] + 0.5) * b / total, abs=0.02)
    info = page.evaluate("document.querySelector('#roles .flame-info').textContent")
    assert info.startswith(f"{what.where} on cpu:0: {format_bytes(total)}, ")


@needs_browser
def test_what_the_memory_is_nests_owner_paths_and_shows_a_hostile_key_as_text(optax_run, browser):
    d, _ = optax_run
    page = open_page(browser, d / "report.html")
    cells = role_cells_drawn(page)
    opt = next(c for c in cells if c["name"] == "optimizer state")

    def under(parent, name, path):  # the one cell of that name and path in the row below, inside ``parent``
        found = [c for c in cells if c["name"] == name and c["path"] == path and c["y"] == parent["y"] + 18
                 and parent["x"] - 0.01 <= c["x"] and c["x"] + c["w"] <= parent["x"] + parent["w"] + 0.01]
        assert len(found) == 1, (name, path, found)
        return found[0]

    node = opt
    for name, path in [("opt_state", "opt_state"), ("[0]", "opt_state[0]"), ("mu", "opt_state[0].mu"),
                       ("'w1'", "opt_state[0].mu['w1']")]:
        node = under(node, name, path)
    assert node["bytes"] == 256 * 512 * 4
    # the hostile key: one part, under params, shown as the text it is
    params = under(next(c for c in cells if c["name"] == "parameters"), "params", "params")
    hostile = under(params, repr(ROLE_KEY), f"params[{ROLE_KEY!r}]")
    assert hostile["bytes"] == 32 * 32 * 4
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.scripts.length") == 3
    page.evaluate(f"""(() => {{ const g = Array.from(document.querySelectorAll('#jmp-roles-0 g.fnode'))
        .find(g => g.dataset.path === {json.dumps(f"params[{ROLE_KEY!r}]")} &&
                   Math.abs(g.querySelector('rect').getBoundingClientRect().left - {hostile["x"]}) < 0.01);
        g.dispatchEvent(new MouseEvent('mousemove', {{bubbles: true, clientX: 50, clientY: 50}})); }})()""")
    tip = page.evaluate("document.querySelector('.tip').innerText").split("\n")
    assert tip[0] == f"params[{ROLE_KEY!r}]" and tip[1].startswith("4.00 KiB (")
    assert "float32[32,32] \u00d71" in tip[3] and tip[-1] == "role: parameters"


def test_owner_paths_split_at_their_parts_as_jax_writes_them():
    """Owner paths are jax.tree_util.keystr's (a dict key's repr in brackets,
    an index, an attribute): every part comes back whole, whatever a key
    holds, and the parts joined are the path."""
    from hypothesis import given, strategies as st
    from jax.tree_util import DictKey, GetAttrKey, SequenceKey, keystr

    from jaxmemprof.analysis.flame import owner_parts, part_label

    assert owner_parts("opt_state[0].mu['w1']") == ["opt_state", "[0]", ".mu", "['w1']"]
    assert [part_label(p) for p in owner_parts("model.layers[0].weight")] == ["model", "layers", "[0]", "weight"]

    @given(st.lists(st.one_of(st.text().map(DictKey), st.integers(0, 99).map(SequenceKey),
                              st.from_regex(r"[A-Za-z_]\w{0,8}", fullmatch=True).map(GetAttrKey)), max_size=5))
    def whole(path):
        assert owner_parts("arg" + keystr(tuple(path))) == ["arg"] + [keystr((k,)) for k in path]

    @given(st.text())
    def joined(text):
        assert "".join(owner_parts(text)) == text

    whole()
    joined()


def test_a_run_without_roles_has_no_roles_data(hostile_run):
    html = (hostile_run / "report.html").read_text()
    doc = json.loads(re.search(r'<script type="application/json" id="jmp-data">(.*?)</script>', html, re.S).group(1))
    assert "roles" not in doc and "jit" in doc


@needs_browser
def test_a_run_without_roles_has_no_roles_section(hostile_run, browser):
    page = open_page(browser, hostile_run / "report.html")
    assert page.evaluate("[document.getElementById('flame') !== null, document.getElementById('roles') === null]") \
        == [True, True]


# -- names are data ----------------------------------------------------------------------

HOSTILE_FILE = "<img src=x onerror=alert(1)>.py"
HOSTILE_LABEL = "</script><script>alert(2)</script>"
HOSTILE_SCRIPT = f'''
import jax.numpy as jnp
import jaxmemprof

x = jnp.ones((256,), jnp.float32)  # SITE-X
jaxmemprof.snapshot({HOSTILE_LABEL!r})
'''


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile_html")
    write_script(d, HOSTILE_FILE, HOSTILE_SCRIPT)
    run_cli("run", "-q", "--interval", "100000", "-o", "run", HOSTILE_FILE, cwd=d, check=0)
    run_cli("report", "run", "--html", "report.html", cwd=d, check=0)
    return d


def test_no_name_can_close_the_data_element(hostile_run):
    html = (hostile_run / "report.html").read_text()
    assert html.count("<script") == 3 and html.count("</script>") == 3
    assert "<img" not in html
    data = re.search(r'<script type="application/json" id="jmp-data">(.*?)</script>', html, re.S).group(1)
    doc = json.loads(data)
    assert HOSTILE_LABEL in doc["strings"] and any(HOSTILE_FILE in s for s in doc["strings"])


@needs_browser
def test_hostile_names_show_as_text(hostile_run, browser):
    page = open_page(browser, hostile_run / "report.html")
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.scripts.length") == 3
    held = page.evaluate("document.getElementById('jmp-held').innerText")
    assert f"{HOSTILE_FILE}:{line_of(hostile_run / HOSTILE_FILE, 'SITE-X')} (<module>)" in held
    texts = page.evaluate("Array.from(document.getElementById('jmp-selected').options).map(o => o.text)")
    assert any(HOSTILE_LABEL in t for t in texts)


@pytest.fixture(scope="module")
def hostile_profiles(tmp_path_factory):
    from test_hostile_names import build

    d = tmp_path_factory.mktemp("hostile_profiles")
    (d / "base.prof").write_bytes(build("base"))
    (d / "new.prof").write_bytes(build("new"))
    run_cli("show", "new.prof", "--html", "show.html", cwd=d, check=0)
    run_cli("diff", "base.prof", "new.prof", "--html", "diff.html", cwd=d, check=0)
    return d


@needs_browser
@pytest.mark.parametrize("name,svg", [("show.html", "jmp-flame"), ("diff.html", "jmp-diff")])
def test_show_and_diff_pages_of_hostile_profiles(hostile_profiles, browser, name, svg):
    from test_hostile_names import HOSTILE, line_of as hline, text

    page = open_page(browser, hostile_profiles / name)
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.scripts.length") == 3
    names = {n for n, *_ in nodes(page, svg)}
    fn, file = HOSTILE[11]  # <script>alert(1)</script> in <img src=x onerror=alert(1)>.py
    assert f"{text(file)}:{hline(11)} ({text(fn)})" in names
    if name == "diff.html":
        assert page.evaluate("document.querySelectorAll('#jmp-flame g.fnode').length") > 1  # each side too


@needs_browser
def test_show_page_of_a_run_snapshot_matches_show(known, browser):
    d, script = known
    run_cli("show", "run@peak", "--html", "peak.html", cwd=d, check=0)
    rows = json.loads(run_cli("show", "run@peak", "--json", cwd=d, check=0).stdout)["rows"]
    page = open_page(browser, d / "peak.html")
    flame = by_name(nodes(page, "jmp-flame"))
    for r in rows:
        if r["bytes"]:
            assert flame[r["site"]][0] == r["bytes"]


# -- outputs -----------------------------------------------------------------------------


def test_html_output_follows_the_output_rules(known):
    d, _ = known
    before = (d / "report.html").read_bytes()
    proc = run_cli("report", "run", "--html", "report.html", cwd=d, check=2)
    assert proc.stderr.strip() == "jaxmemprof: error: report.html: already exists; pass --force to overwrite it"
    assert (d / "report.html").read_bytes() == before
    run_cli("report", "run", "--html", "report.html", "--force", cwd=d, check=0)
    (d / "adir").mkdir()
    proc = run_cli("show", "run@peak", "--html", "adir", cwd=d, check=2)
    assert proc.stderr.count("\n") == 1 and "adir" in proc.stderr and "Traceback" not in proc.stderr


# -- long runs ---------------------------------------------------------------------------


def test_a_long_run_is_downsampled_keeping_its_peaks(tmp_path):
    """3,000 snapshots (more than the page draws) with a spike at snapshot
    1,234: the page keeps it, the first, the final and the labelled ones, and
    its data stays small."""
    from jaxmemprof.analysis.flame import MAX_POINTS
    from jaxmemprof.store.writer import RunWriter, SnapshotRecord
    from jaxmemprof.pprof.writer import write_profile

    n = 3000
    w = RunWriter(tmp_path / "run", {"jaxmemprof_version": "test", "argv": ["sim"], "start_epoch": 0.0})
    prof = write_profile([("allocations", "count"), ("space", "bytes")],
                         [((("f", "train.py", 10),), (1, 40), {"kind": "buffer", "device": "cpu:0"})])
    for i in range(1, n + 1):
        spike = i == 1234
        arrays = [(10 * i + k, 10 * i + k, "[10]", "float32", 40, "[40]", '["cpu:0"]', "[null]",
                   "SingleDeviceSharding", None, 1 + k % 3) for k in range(5)]
        if spike:
            arrays.append((10 * i + 9, 10 * i + 9, "[1000000]", "float32", 4_000_000, "[4000000]", '["cpu:0"]',
                           "[null]", "SingleDeviceSharding", None, 4))
        ended = [(10 * (i - 1) + k, i - 1, "freed") for k in range(5)] + ([(10 * (i - 1) + 9, i - 1, "freed")]
                                                                          if i - 1 == 1234 else [])
        rec = SnapshotRecord(
            t_wall=i * 0.5, t_mono=i * 0.5, trigger="api" if i % 700 == 0 else "interval",
            label="checkpoint" if i % 700 == 0 else None, profile=prof, live_bytes=200 + (4_000_000 if spike else 0),
            buffers=5, arrays=5,
            new_stacks=[(s, json.dumps([["train.py", 10 + s, "f"]])) for s in range(1, 5)] if i == 1 else [],
            new_arrays=arrays, ended_arrays=ended if i > 1 else [])
        w.add_snapshot(rec)
    w.finish(end_time="x", exit_status=0, ended_by="exit", duration_s=n * 0.5)
    run_cli("report", str(tmp_path / "run"), "--html", str(tmp_path / "long.html"), check=0)
    html = (tmp_path / "long.html").read_text()
    doc = json.loads(re.search(r'id="jmp-data">(.*?)</script>', html, re.S).group(1))
    snaps = doc["snapshots"]["snapshot"]
    assert doc["snapshots_total"] == n and len(snaps) <= MAX_POINTS
    assert 1234 in snaps and 1 in snaps and n in snaps and all(s in snaps for s in range(700, n, 700))
    j = snaps.index(1234)
    assert doc["snapshots"]["live_bytes"][j] == 4_000_200 and doc["peak"]["snapshot"] == 1234
    assert len(html) < 400_000


# -- devices and the allocator's own figures ----------------------------------------------

SHARDED = '''
import jax
import jaxmemprof
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

# From host memory straight to the devices: a jnp array made first would sit on cpu:0 until moved, and a
# snapshot taken meanwhile (the sampler's first, on a loaded machine) would show it there.
mesh = Mesh(jax.devices(), ("x",))
a = jax.device_put(np.zeros((1024, 256), np.float32), NamedSharding(mesh, PartitionSpec("x")))  # SITE-SHARDED
b = jax.device_put(np.ones((256,), np.float32), jax.devices()[1])  # SITE-ONE
jaxmemprof.snapshot("both")
'''


@needs_browser
def test_device_selector_shows_each_device_s_share(tmp_path, browser):
    from conftest import cpu_env

    script = write_script(tmp_path, "sharded.py", SHARDED)
    env = cpu_env(XLA_FLAGS="--xla_force_host_platform_device_count=2")
    run_cli("run", "-q", "--interval", "100000", "-o", "run", script.name, cwd=tmp_path, env=env, check=0)
    run_cli("report", "run", "--html", "page.html", cwd=tmp_path, check=0)
    page = open_page(browser, tmp_path / "page.html")
    options = page.evaluate("Array.from(document.getElementById('jmp-device').options).map(o => o.value)")
    assert options == ["", "cpu:0", "cpu:1"]
    sharded, one = site(script, "SITE-SHARDED", "<module>"), site(script, "SITE-ONE", "<module>")
    flame = by_name(nodes(page, "jmp-flame"))
    assert flame[sharded][0] == MIB and flame[one][0] == KIB
    for device, expect in (("cpu:0", {sharded: MIB // 2}), ("cpu:1", {sharded: MIB // 2, one: KIB})):
        set_select(page, "jmp-device", device)
        flame = by_name(nodes(page, "jmp-flame"))
        assert {k: v[0] for k, v in flame.items() if k != "all"} == expect
        areas = page.evaluate("Array.from(document.querySelectorAll('#jmp-timeline path.area')).map(p => p.dataset.site)")
        assert sorted(areas) == sorted(expect)


def _simulated_gpu_run(path, n=20, limit=8 * MIB):
    """A run as a GPU records it (allocator statistics per snapshot), made
    through the run writer: one 1 MiB array per snapshot kept, and the
    allocator holding 512 KiB more than the arrays."""
    from jaxmemprof.pprof.writer import write_profile
    from jaxmemprof.store.writer import RunWriter, SnapshotRecord

    w = RunWriter(path, {"jaxmemprof_version": "test", "argv": ["sim"], "start_epoch": 0.0})
    prof = write_profile([("allocations", "count"), ("space", "bytes")],
                         [((("f", "train.py", 10),), (1, MIB), {"kind": "buffer", "device": "cuda:0"})])
    for i in range(1, n + 1):
        live = i * MIB
        rec = SnapshotRecord(
            t_wall=i * 1.0, t_mono=i * 1.0, trigger="interval", label=None, profile=prof, live_bytes=live,
            buffers=i, arrays=i, new_stacks=[(1, json.dumps([["train.py", 10, "f"]]))] if i == 1 else [],
            new_arrays=[(i, i, "[262144]", "float32", MIB, f"[{MIB}]", '["cuda:0"]', "[null]",
                         "SingleDeviceSharding", None, 1)],
            memory_stats=[("cuda:0", "bytes_in_use", live + 512 * KIB), ("cuda:0", "bytes_limit", limit),
                          ("cuda:0", "peak_bytes_in_use", live + 512 * KIB)])
        w.add_snapshot(rec)
    w.finish(end_time="x", exit_status=0, ended_by="exit", duration_s=float(n))


@needs_browser
def test_allocator_lines_where_recorded(tmp_path, browser):
    _simulated_gpu_run(tmp_path / "run", limit=24 * MIB)
    run_cli("report", str(tmp_path / "run"), "--html", str(tmp_path / "page.html"), check=0)
    page = open_page(browser, tmp_path / "page.html")
    lines = page.evaluate("Array.from(document.querySelectorAll('#jmp-timeline path[data-line]')).map(p => p.dataset.line)")
    assert lines == ["bytes_in_use", "bytes_limit"]
    page.evaluate("""(() => { const h = document.querySelector('#jmp-timeline rect.hit'), r = h.getBoundingClientRect();
        h.dispatchEvent(new MouseEvent('mousemove', {bubbles: true, clientX: r.right - 1, clientY: r.top + 10})); })()""")
    tip = page.evaluate("document.querySelector('.tip').innerText")
    assert "live 20.00 MiB" in tip and "bytes_in_use 20.50 MiB" in tip and "bytes_limit 24.00 MiB" in tip
    # a limit far above the run is named, not drawn (it would flatten the chart)
    _simulated_gpu_run(tmp_path / "run2", limit=80 * 1024 * MIB)
    run_cli("report", str(tmp_path / "run2"), "--html", str(tmp_path / "page2.html"), check=0)
    page = open_page(browser, tmp_path / "page2.html")
    lines = page.evaluate("Array.from(document.querySelectorAll('#jmp-timeline path[data-line]')).map(p => p.dataset.line)")
    assert lines == ["bytes_in_use"]
    assert "bytes_limit 80.00 GiB (above the chart)" in page.evaluate("document.querySelector('#timeline').innerText")


# -- a multi-process job ---------------------------------------------------------------------


@needs_browser
def test_job_page_shows_the_job_and_each_process(known, browser, tmp_path):
    """A job of two processes (two recorded runs laid out as RUN/process-N):
    the job's timeline and processes, and each process's own page."""
    import shutil

    d, script = known
    other = write_script(tmp_path, "other.py", '''
import jax.numpy as jnp
import jaxmemprof

x = jnp.ones((128, 128), jnp.float32)  # SITE-OTHER
jaxmemprof.snapshot("x")
''')
    run_cli("run", "-q", "--interval", "100000", "-o", "other", other.name, cwd=tmp_path, check=0)
    (tmp_path / "job").mkdir()
    shutil.copytree(d / "run", tmp_path / "job" / "process-0")
    shutil.copytree(tmp_path / "other", tmp_path / "job" / "process-1")
    run_cli("report", "job", "--html", "job.html", cwd=tmp_path, check=0)
    page = open_page(browser, tmp_path / "job.html")
    rows = page.evaluate("Array.from(document.querySelectorAll('#jmp-processes tbody tr')).map(r => r.innerText)")
    assert len(rows) == 2 and rows[0].startswith("0") and "1.55 MiB" in rows[0] and "64.00 KiB" in rows[1]
    assert page.evaluate("document.querySelectorAll('#jmp-job-timeline path[data-line=job]').length") == 1
    # the process holding the most at the job's peak is shown first
    assert page.evaluate("document.querySelector('#jmp-process-view h1').textContent").startswith("process 0")
    assert by_name(nodes(page, "jmp-flame"))[site(script, "SITE-BIG", "make_big")][0] == BIG_BYTES
    set_select(page, "jmp-process", 1)
    assert page.evaluate("document.querySelector('#jmp-process-view h1').textContent").startswith("process 1")
    flame = by_name(nodes(page, "jmp-flame"))
    assert flame[f"other.py:{line_of(other, 'SITE-OTHER')} (<module>)"][0] == 64 * KIB
    assert page.errors == []


def test_a_run_whose_every_cell_changes_is_drawn_with_fewer_snapshots(tmp_path, monkeypatch):
    """More changes than the page keeps: fewer snapshots, the peak among them,
    and each kept snapshot's bytes exactly the timeline's."""
    from jaxmemprof.analysis import flame
    from jaxmemprof.analysis.timeline import timeline
    from jaxmemprof.pprof.writer import write_profile
    from jaxmemprof.store.reader import load_run
    from jaxmemprof.store.writer import RunWriter, SnapshotRecord

    n, stacks = 300, 40
    w = RunWriter(tmp_path / "run", {"jaxmemprof_version": "test", "argv": ["sim"], "start_epoch": 0.0})
    prof = write_profile([("allocations", "count"), ("space", "bytes")],
                         [((("f", "train.py", 10),), (1, 4), {"kind": "buffer", "device": "cpu:0"})])
    for i in range(1, n + 1):
        size = [4 * (1 + (i * 7 + k * 13) % 100) * (50 if i == 177 else 1) for k in range(stacks)]
        w.add_snapshot(SnapshotRecord(
            t_wall=float(i), t_mono=float(i), trigger="interval", label=None, profile=prof, live_bytes=sum(size),
            buffers=stacks, arrays=stacks,
            new_stacks=[(k + 1, json.dumps([["m.py", 10 + k, "f"]])) for k in range(stacks)] if i == 1 else [],
            new_arrays=[(i * stacks + k, i * stacks + k, f"[{size[k] // 4}]", "float32", size[k], f"[{size[k]}]",
                         '["cpu:0"]', "[null]", "SingleDeviceSharding", None, k + 1) for k in range(stacks)],
            ended_arrays=[((i - 1) * stacks + k, i - 1, "freed") for k in range(stacks)] if i > 1 else []))
    w.finish(end_time="x", exit_status=0, ended_by="exit", duration_s=float(n))
    run = load_run(tmp_path / "run")
    whole = flame.run_cells(attribute(run))
    assert len(whole.positions) == n and sum(map(len, whole.changes)) > 20_000
    monkeypatch.setattr(flame, "MAX_CHANGES", 8000)
    cells = flame.run_cells(attribute(run))
    assert sum(map(len, cells.changes)) <= 8000 and len(cells.positions) < n
    snaps = run.snapshots["snapshot"].to_numpy()[cells.positions].tolist()
    assert 177 in snaps and 1 in snaps and n in snaps
    live = timeline(attribute(run)).totals["live_bytes"].to_numpy()[cells.positions]
    assert [int(cells.values_at(j)["bytes"].sum()) for j in range(len(cells.positions))] == live.tolist()


@needs_browser
def test_findings_of_the_bundled_run_and_a_fix_copied(tmp_path, browser):
    """The bundled leaking run: its two findings (donation, leak) in full,
    each fix copied to the clipboard by its button."""
    from conftest import REPO

    run_cli("report", REPO / "sample_runs" / "runs" / "mlp-leak", "--html", tmp_path / "leak.html", check=0)
    doc = json.loads(run_cli("report", REPO / "sample_runs" / "runs" / "mlp-leak", "--json", check=0).stdout)
    page = open_page(browser, tmp_path / "leak.html")
    rules = page.evaluate("Array.from(document.querySelectorAll('#jmp-findings li.finding')).map(li => li.dataset.rule)")
    assert rules == [f["rule"] for f in doc["findings"]] and sorted(rules) == ["donate", "leak"]
    fixes = page.evaluate("Array.from(document.querySelectorAll('#jmp-findings .fix code')).map(c => c.textContent)")
    assert fixes == [f["fix"] for f in doc["findings"]]
    assert "donate_argnums=(0, 1)" in fixes[rules.index("donate")]
    browser.send("Browser.grantPermissions", {"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    page.evaluate("document.querySelectorAll('#jmp-findings .copy')[0].click()")
    assert page.evaluate("new Promise(r => setTimeout(() => r(document.querySelector('#jmp-findings .copy').textContent), 300))") == "copied"
    assert page.evaluate("navigator.clipboard.readText()") == fixes[0]
    # the headline's "what to change" names the same fixes, most important first
    change = page.evaluate("document.getElementById('jmp-change').innerText")
    assert all(f["brief_fix"] in change for f in doc["findings"])


@needs_browser
def test_jit_program_order_curve_by_line(known, browser):
    # double(x): its argument x and its output x * 2.0, 256 KiB each, live together at its peak.
    d, script = known
    doc = json.loads(run_cli("report", "run", "--json", cwd=d, check=0).stdout)
    rows = [r for r in doc["jit_curve"] if r["function"] == "double"]
    at_peak = {r["site"]: r["bytes"] for r in rows if r["position"] == r["program_peak_position"]}
    output_line = f"known.py:{line_of(script, 'return x * 2.0')} (double)"
    assert at_peak == {"argument x": A_BYTES, output_line: DOUBLE_BYTES}
    assert {r["program_peak_bytes"] for r in rows} == {A_BYTES + DOUBLE_BYTES}
    page = open_page(browser, d / "report.html")
    areas = page.evaluate("Array.from(document.querySelectorAll('#jmp-jit-curve-0 path.area')).map(p => p.dataset.site)")
    assert sorted(areas) == sorted(["argument x", output_line])
    hint = page.evaluate("document.querySelector('#jmp-jit-curve-0 p.hint').textContent")
    assert hint.startswith("double: its buffers live at once reach 512.00 KiB at position ")
