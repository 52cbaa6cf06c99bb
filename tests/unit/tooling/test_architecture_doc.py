"""docs/architecture.md says what the import contracts in pyproject.toml enforce: the layers of
each layered contract, word for word, every contract named, and a row in the room table for
every package and module the product's layers list. A layer added to the contracts and not to
the page (or the other way round) fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "architecture.md"


def contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {c["id"]: c for c in config["tool"]["importlinter"]["contracts"]}


def contract_line(contract_id: str) -> str:
    """The page's bullet for a contract: its text up to the next bullet or blank line."""
    text = PAGE.read_text()
    match = re.search(rf"^- `{re.escape(contract_id)}`: (.*?)(?=^- |^\s*$)", text, re.M | re.S)
    assert match is not None, f"docs/architecture.md names no contract `{contract_id}`"
    return " ".join(match.group(1).split())


def room_rows() -> set[str]:
    """The first cell of every row of the room table, without its backquotes."""
    rows = set()
    for line in PAGE.read_text().splitlines():
        match = re.match(r"^\| `([^`]+)` \|", line)
        if match:
            rows.add(match.group(1))
    return rows


def test_every_contract_is_named_on_the_page() -> None:
    for contract_id in contracts():
        contract_line(contract_id)


def test_the_layers_on_the_page_are_the_contracts_layers() -> None:
    for contract_id, contract in contracts().items():
        if contract["type"] != "layers":
            continue
        layers = " > ".join(f"`{layer}`" for layer in contract["layers"])
        assert contract_line(contract_id).startswith(layers), (
            f"{contract_id}: the page should say {layers}"
        )


def test_every_room_of_the_product_layers_has_a_row() -> None:
    layers = contracts()["product-layers"]["layers"]
    product = ROOT / "src" / "jobset_controller"
    rows = room_rows()
    for layer in layers:
        for name in (part.strip() for part in layer.split("|")):
            room = f"{name}/" if (product / name).is_dir() else f"{name}.py"
            assert room in rows, f"docs/architecture.md has no row for `{room}`"


def test_every_room_on_the_page_exists() -> None:
    product = ROOT / "src" / "jobset_controller"
    for room in room_rows() - {"jobset_controller_dev/"}:
        assert (product / room.rstrip("/")).exists(), f"`{room}` is not under src/jobset_controller"
