"""`tableflow docs generate`: the site from the project alone, looked at in a real browser."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tableflow_core.cli.main import cli
from tests.unit.test_docs_site_render import write_docs_project


def _chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no headless browser: scripts/bootstrap.sh installs Debian's chromium")


def _browser(*args: str) -> subprocess.CompletedProcess[str]:
    command = [
        _chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-dev-shm-usage", "--hide-scrollbars", *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


def png_rows(path: Path) -> tuple[int, int, int, list[bytearray]]:
    """Width, height, channels and the decoded rows of an 8-bit RGB(A) PNG (no Pillow)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", header[:10])
    assert depth == 8 and colour in (2, 6)
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    previous, rows = bytearray(stride), []
    for row in range(height):
        start = row * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, up_left = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                pred = left if pa <= pb and pa <= pc else up if pb <= pc else up_left
                line[i] = (line[i] + pred) & 0xFF
        rows.append(line)
        previous = line
    return width, height, channels, rows


def png_pixels(path: Path) -> tuple[int, int, set[tuple[int, ...]]]:
    """Width, height and the distinct colours (sampled) of an 8-bit RGB(A) PNG."""
    width, height, channels, rows = png_rows(path)
    colours: set[tuple[int, ...]] = set()
    for line in rows[::4]:
        colours.update(tuple(line[i : i + 3]) for i in range(0, len(line), channels * 4))
    return width, height, colours


def rightmost(path: Path, colour: tuple[int, int, int]) -> int:
    """The largest x of a pixel of `colour` in the picture (-1 if none)."""
    width, _height, channels, rows = png_rows(path)
    found = -1
    wanted = bytes(colour)
    for line in rows:
        for x in range(width - 1, found, -1):
            if line[x * channels : x * channels + 3] == wanted:
                found = x
                break
    return found


@pytest.mark.slow
def test_site_renders_in_a_headless_browser(tmp_path: Path) -> None:
    root = write_docs_project(tmp_path / "p")
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "docs", "generate", "--offline"])
    assert outcome.exit_code == 0, outcome.output
    index = root / "target" / "docs" / "index.html"

    dom = _browser("--dump-dom", index.as_uri()).stdout
    svg_text = re.findall(r'<text[^>]*class="label"[^>]*>([^<]+)</text>', dom)
    assert {"orders", "customers", "clicks", "shop.dead_letters", "analytics"} <= set(svg_text)
    assert 'href="tables/orders.html"' in dom

    shot = tmp_path / "index.png"
    _browser(f"--screenshot={shot}", "--window-size=1400,900", index.as_uri())
    width, height, colours = png_pixels(shot)
    assert (width, height) == (1400, 900)
    # Header, node fills and text: far more than a blank page's single colour.
    assert len(colours) > 20
    assert (29, 43, 69) in colours  # the header's colour: the stylesheet was applied

    page_shot = tmp_path / "orders.png"
    page = root / "target" / "docs" / "tables" / "orders.html"
    page_dom = _browser("--dump-dom", page.as_uri()).stdout
    assert "day(created_at)" in page_dom and "shop.orders" in page_dom
    _browser(f"--screenshot={page_shot}", "--window-size=1200,1400", page.as_uri())
    assert len(png_pixels(page_shot)[2]) > 20


GRID_HEADER = (240, 243, 248)  # table.grid th background


@pytest.mark.slow
def test_a_wide_window_is_used(tmp_path: Path) -> None:
    """On a 2400-pixel window the grids span the page (they used a quarter of it)."""
    root = write_docs_project(tmp_path / "p")
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "docs", "generate", "--offline"])
    assert outcome.exit_code == 0, outcome.output
    site = root / "target" / "docs"
    for page in (site / "index.html", site / "tables" / "orders.html"):
        shot = tmp_path / f"{page.stem}-wide.png"
        _browser(f"--screenshot={shot}", "--window-size=2400,1400", page.as_uri())
        assert rightmost(shot, GRID_HEADER) > 0.9 * 2400, page.name


def test_pages_show_project_relative_paths_and_durations_as_written(tmp_path: Path) -> None:
    root = write_docs_project(tmp_path / "p")
    tables_file = root / "tables" / "shop.yml"
    tables_file.write_text(tables_file.read_text().replace(
        "name: clicks", "name: clicks\n  refresh_interval: 90s"
    ))  # fmt: skip
    (root / "tableflow_project.yml").write_text(
        (root / "tableflow_project.yml").read_text() + "  refresh_interval: 10m\n"
    )
    outcome = CliRunner().invoke(cli, ["--project-dir", str(root), "docs", "generate", "--offline"])
    assert outcome.exit_code == 0, outcome.output
    site = root / "target" / "docs"
    pages = {p.name: p.read_text() for p in site.rglob("*.html")}
    assert not [name for name, text in pages.items() if str(root) in text]  # no local path
    orders, clicks = pages["orders.html"], pages["clicks.html"]
    assert "<code>tables/shop.yml:2</code>" in orders
    assert "<dd>10m</dd>" in orders and "600s" not in orders
    assert "<dd>90s</dd>" in clicks
