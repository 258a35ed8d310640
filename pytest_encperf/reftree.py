"""The reference tree of the real-work workloads: a directory of mixed file sizes, deterministic
from a seed (no pytest).

The same size and seed give a byte-identical tree: the same names, sizes, contents, modes and
modification times, whatever the machine, so two runs archive, copy and delete the same data.
``mixed`` is the tree users archive or copy (many small source-like files, some medium, a few
large); ``source`` is a source tree of small files only (what ``untar`` extracts and
``metadata`` walks).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path

KiB = 1024
MiB = 1024 * KiB

# A fixed modification time (2023-11-14 22:13:20 UTC) plus the file's index: the tree's mtimes
# depend on nothing but the seed.
EPOCH = 1_700_000_000
KINDS = ("mixed", "source")
# Share of the tree's bytes in each size class of the mixed tree: (share, smallest, largest)
MIXED_CLASSES: tuple[tuple[float, int, int], ...] = (
    (0.15, 256, 16 * KiB),  # many small source-like files
    (0.35, 64 * KiB, 1 * MiB),  # some medium files (documents, images)
    (0.50, 4 * MiB, 16 * MiB),  # a few large files (media, archives)
)
SOURCE_CLASSES: tuple[tuple[float, int, int], ...] = ((1.0, 128, 24 * KiB),)
FILES_PER_DIR = 24
WORDS = (
    *("static", "int", "return", "if", "else", "for", "while", "struct", "const", "char", "void"),
    *("unsigned", "long", "size_t", "buffer", "length", "offset", "count", "error", "result"),
    *("value", "index", "table", "entry", "node", "list", "next", "prev", "init", "free", "alloc"),
    *("lock", "unlock", "read", "write", "open", "close", "flush", "sync", "block", "page", "cache"),
)
SOURCE_SUFFIXES = (".c", ".h", ".py", ".txt", ".md", ".sh")


@dataclass(frozen=True)
class TreeFile:
    path: str  # relative to the tree's root, "/"-separated
    size: int
    mode: int  # permission bits
    mtime: int  # seconds since the epoch
    text: bool  # source-like text (compresses) rather than random bytes (does not)


def plan_tree(size: int, seed: int, kind: str = "mixed") -> list[TreeFile]:
    """The files of the tree of about ``size`` bytes (never more), in creation order."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if size <= 0:
        raise ValueError("the tree size must be positive")
    rng = random.Random(f"encperf-reftree {kind} {seed}")
    files: list[TreeFile] = []
    for level, (share, smallest, largest) in enumerate(MIXED_CLASSES if kind == "mixed" else SOURCE_CLASSES):
        budget = int(size * share)
        while budget >= smallest or (budget > 0 and level == 0 and not files):
            file_size = min(budget, rng.randint(smallest, largest))
            index = len(files)
            text = level == 0 or (level == 1 and rng.random() < 0.5)
            suffix = rng.choice(SOURCE_SUFFIXES) if text else rng.choice((".bin", ".dat", ".jpg"))
            directory = f"d{level}/s{index // FILES_PER_DIR:03d}"
            if level == 0 and index % 5 == 0:  # a nested level, as source trees have
                directory += f"/sub{index % 3}"
            mode = 0o755 if suffix == ".sh" else 0o644
            files.append(TreeFile(f"{directory}/f{index:05d}{suffix}", file_size, mode, EPOCH + index, text))
            budget -= file_size
    return files


def _content(entry: TreeFile, rng: random.Random) -> bytes:
    if not entry.text:
        return rng.randbytes(entry.size)
    words: list[str] = []
    length = 0
    while length < entry.size:
        line = " ".join(rng.choices(WORDS, k=rng.randint(2, 10))) + ";\n"
        words.append(line)
        length += len(line)
    return "".join(words).encode()[: entry.size]


def write_tree(root: Path, size: int, seed: int, kind: str = "mixed") -> list[TreeFile]:
    """Create the tree under ``root`` (a new directory: it must not exist). Returns its files."""
    files = plan_tree(size, seed, kind)
    rng = random.Random(f"encperf-reftree content {kind} {seed}")
    root.mkdir(mode=0o700)
    directories: set[Path] = set()
    for entry in files:
        path = root / entry.path
        for parent in reversed(path.relative_to(root).parents[:-1]):
            if root / parent not in directories:
                (root / parent).mkdir(exist_ok=True)
                directories.add(root / parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(_content(entry, rng))
        os.chmod(path, entry.mode)
        os.utime(path, (entry.mtime, entry.mtime))
    for directory in sorted(directories, key=lambda p: len(p.parts), reverse=True):
        os.chmod(directory, 0o755)  # whatever the umask
        os.utime(directory, (EPOCH, EPOCH))
    os.utime(root, (EPOCH, EPOCH))
    return files
