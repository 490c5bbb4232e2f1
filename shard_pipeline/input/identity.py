"""What a corpus root is called, and where its rows live in the counts index: two answers, two protections.

* Names: a root is HPLT when its folder is a release subset (v4 ``clean``/``noisy``, v3 ``sorted``; HTTP is
  v3 ``sorted``) and no ``--corpus-name`` was given, so HPLT outputs keep their bytes; any other root is
  named after itself (``N/<lang>/<shard>``, ``N-<LANG>``).
* The index key: ``<corpus>/<subset>`` only for the folders a shipped preset names and the v3 map; any other
  root is ``custom/<name>-<sha256 of its path>``, so a private ``clean`` never rewrites HPLT's rows.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

HPLT_SUBSETS: dict[str, tuple[str, ...]] = {"v4": ("clean", "noisy"), "v3": ("sorted",)}
URL_SUBSET = "sorted"  # inputs listed from <base_url>/<lang>.map are HPLT v3 sorted
CUSTOM_INDEX_DIR = "custom"  # the sampler reads only v3/ and v4/: nothing of ours there can meet its rows
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


@dataclass(frozen=True)
class CorpusNames:
    """How one corpus is named in the output: HPLT's release names or its own."""

    corpus: str  # the record shape: v3 or v4
    name: str  # HPLT: the subset (clean); otherwise the corpus's own name (big2)
    hplt: bool

    def source_id(self, lang: str, shard: str) -> str:
        return f"hplt-{self.corpus}/{self.name}/{lang}/{shard}" if self.hplt else f"{self.name}/{lang}/{shard}"

    def dataset(self, lang: str) -> str:
        return f"hplt-{self.corpus}-{self.name}-{lang}" if self.hplt else f"{self.name}-{lang}"

    def source(self, lang: str) -> str:
        """The card's source line: HPLT provenance is claimed only for HPLT roots."""
        return f"HPLT {self.corpus} {self.name} {lang}" if self.hplt else f"{self.name} {lang} (a local corpus, not HPLT)"


def check_name(name: str, what: str) -> str:
    """A corpus name goes into source ids, dataset names and index folders: one safe path component."""
    if not _NAME_RE.match(name):
        raise ValueError(f"{what} {name!r} cannot name a corpus: use letters, digits and . _ + - "
                         "(starting with a letter or digit)")
    return name


def names_for(corpus: str, folder: str, corpus_name: str | None = None) -> CorpusNames:
    """Names of a root whose folder is `folder` (URL inputs: ``sorted``); `corpus_name` = --corpus-name."""
    if corpus_name is not None:
        return CorpusNames(corpus, check_name(corpus_name, "--corpus-name"), False)
    if is_hplt(corpus, folder):
        return CorpusNames(corpus, folder, True)
    try:
        return CorpusNames(corpus, check_name(folder, "the corpus root's folder name"), False)
    except ValueError as exc:
        raise ValueError(f"{exc}; give the corpus a name with --corpus-name NAME") from None


def is_hplt(corpus: str, subset: str) -> bool:
    """True when `subset` is one of the release's subset folders (create.dataset_name's rule, with no --corpus-name)."""
    return subset in HPLT_SUBSETS.get(corpus, ())


def _real(path: Path | str) -> str:
    return os.path.realpath(os.path.abspath(path))


def known_hplt_roots(preset_values: list[dict[str, str]]) -> dict[str, set[str]]:
    """corpus -> resolved folders whose rows use the sampler's layout: each preset root and its sibling subsets."""
    known: dict[str, set[str]] = {c: set() for c in HPLT_SUBSETS}
    for values in preset_values:
        for corpus, key in (("v4", "V4_ROOT"), ("v3", "V3_ROOT")):
            root = values.get(key)
            if root:
                parent = Path(_real(root)).parent
                known[corpus].update(str(parent / s) for s in HPLT_SUBSETS[corpus])
    return known


def index_key(corpus: str, root: Path | None, known: dict[str, set[str]], name: str | None = None) -> tuple[str, str]:
    """(corpus dir, subset dir) of the root's rows: ``v4/clean`` for a known HPLT root, else
    ``custom/<name>-<hash>``; `root` None: inputs from the HPLT v3 map (trusted by name, as the sampler does)."""
    if root is None:
        return corpus, URL_SUBSET
    real = _real(root)
    if real in known.get(corpus, set()):
        return corpus, Path(real).name
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    label = re.sub(r"[^A-Za-z0-9._+-]", "_", name or Path(real).name).lstrip(".") or "root"
    return CUSTOM_INDEX_DIR, f"{label}-{digest}"
