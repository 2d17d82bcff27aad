"""Batch transforms (crop, flip, normalize, cutout, compose) against per-image oracles, and samplers applying them."""
from __future__ import annotations

import numpy as np
import pytest

import d5
from d5.errors import D5Error, DatasetError, InvalidHyperparameterError, ShapeError
from d5.training.dataset import NumpyDataset
from d5.training.sampler import TRANSFORM_STREAM, OrderedSampler, ShuffleSampler
from d5.training.transforms import Compose, Cutout, Normalize, RandomCrop, RandomHorizontalFlip, Transform


def unique_images(n=40, c=2, h=6, w=5, dtype=np.float32):
    """Images whose pixels are all distinct and non-zero, so a window of the padded image identifies its offset."""
    return (np.arange(n * c * h * w, dtype=np.float64) + 1).reshape(n, c, h, w).astype(dtype)


def crop_offset(padded_image, crop):
    """The (top, left) at which ``crop`` sits in ``padded_image``, by brute force over every offset (the oracle)."""
    crop_h, crop_w = crop.shape[-2:]
    hits = [(top, left) for top in range(padded_image.shape[1] - crop_h + 1)
            for left in range(padded_image.shape[2] - crop_w + 1)
            if np.array_equal(padded_image[:, top:top + crop_h, left:left + crop_w], crop)]
    assert len(hits) == 1, f"the crop matches {len(hits)} windows of the padded image"
    return hits[0]


# --- RandomCrop ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size, padding", [(6, 2), ((4, 3), 0), ((7, 5), 1), ((10, 9), 2)])
def test_random_crop_takes_a_window_of_the_zero_padded_image(size, padding):
    images = unique_images()
    crops = RandomCrop(size, padding)(images, np.random.default_rng(0))
    crop_h, crop_w = (size, size) if isinstance(size, int) else size
    assert crops.shape == (len(images), images.shape[1], crop_h, crop_w) and crops.dtype == images.dtype
    for image, crop in zip(images, crops):
        padded = np.zeros((image.shape[0], image.shape[1] + 2 * padding, image.shape[2] + 2 * padding), image.dtype)
        padded[:, padding:padding + image.shape[1], padding:padding + image.shape[2]] = image
        crop_offset(padded, crop)  # asserts the crop is exactly one window of the padded image


def test_random_crop_offsets_are_uniform_and_independent_per_image():
    images = unique_images(n=1, c=1, h=4, w=4).repeat(900, axis=0)
    crops = RandomCrop(4, padding=1)(images, np.random.default_rng(1))
    padded = np.pad(images[0], ((0, 0), (1, 1), (1, 1)))
    offsets = [crop_offset(padded, crop) for crop in crops]
    counts = np.array([offsets.count((top, left)) for top in range(3) for left in range(3)])
    assert counts.sum() == 900 and (counts > 0).all()
    # 9 equally likely offsets, 100 expected each: a chi-square over 8 degrees of freedom below its 99.9% point.
    assert ((counts - 100.0) ** 2 / 100.0).sum() < 26.1


def test_random_crop_is_reproducible_and_never_mutates_its_input():
    images = unique_images()
    images.flags.writeable = False  # dataset arrays are read-only; a transform must still work
    first = RandomCrop(5, 2)(images, np.random.default_rng(7))
    again = RandomCrop(5, 2)(images, 7)  # an int seed is the same generator
    other = RandomCrop(5, 2)(images, np.random.default_rng(8))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    np.testing.assert_array_equal(images, unique_images())
    assert first.flags.writeable and not np.shares_memory(first, images)


def test_random_crop_without_padding_to_the_full_size_is_a_copy():
    images = unique_images()
    crops = RandomCrop((6, 5))(images, 0)
    np.testing.assert_array_equal(crops, images)
    assert not np.shares_memory(crops, images)


# --- RandomHorizontalFlip -----------------------------------------------------------------------------------

def test_horizontal_flip_mirrors_about_p_of_the_images():
    images = unique_images(n=2000, c=1, h=2, w=3)
    out = RandomHorizontalFlip(p=0.3)(images, np.random.default_rng(2))
    mirrored = np.array([np.array_equal(o, i[:, :, ::-1]) for o, i in zip(out, images)])
    unchanged = np.array([np.array_equal(o, i) for o, i in zip(out, images)])
    assert (mirrored ^ unchanged).all()  # every image is exactly one of the two
    # Binomial(2000, 0.3): mean 600, sd 20.5; 5 sd either side.
    assert 497 < mirrored.sum() < 703


@pytest.mark.parametrize("p", [0.0, 1.0])
def test_horizontal_flip_extremes(p):
    images = unique_images()
    out = RandomHorizontalFlip(p)(images, 0)
    np.testing.assert_array_equal(out, images[..., ::-1] if p else images)
    assert out is not images and not np.shares_memory(out, images)


# --- Normalize ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_normalize_per_channel_against_a_loop(dtype):
    images = np.random.default_rng(3).random((5, 3, 4, 4)).astype(dtype)
    mean, std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    out = Normalize(mean, std)(images)
    assert out.dtype == dtype and out.shape == images.shape
    for c in range(3):
        expected = (images[:, c].astype(np.float64) - mean[c]) / std[c]
        np.testing.assert_allclose(out[:, c], expected, rtol=1e-6 if dtype == np.float32 else 1e-12, atol=1e-6)


def test_normalize_refuses_mismatched_channels_integers_and_bad_statistics():
    with pytest.raises(ShapeError, match="3 channel.*images have 1"):
        Normalize([0.5] * 3, [0.5] * 3)(np.zeros((2, 1, 4, 4), np.float32))
    with pytest.raises(ShapeError, match="floating-point images; got uint8"):
        Normalize([0.5], [0.5])(np.zeros((2, 1, 4, 4), np.uint8))
    with pytest.raises(InvalidHyperparameterError, match="std must be positive"):
        Normalize([0.5, 0.5], [0.5, 0.0])
    with pytest.raises(InvalidHyperparameterError, match="one mean and one std per channel"):
        Normalize([0.5, 0.5], [0.5])
    with pytest.raises(InvalidHyperparameterError, match="list of numbers"):
        Normalize(["red"], [0.5])


# --- Compose and bad arguments ------------------------------------------------------------------------------

def test_compose_applies_in_order_from_one_generator():
    images = unique_images()
    steps = [RandomCrop(6, 2), RandomHorizontalFlip(), Normalize([1.0, 2.0], [3.0, 4.0])]
    out = Compose(steps)(images, np.random.default_rng(4))
    rng = np.random.default_rng(4)  # the oracle: the same steps by hand, sharing one generator
    expected = images
    for step in steps:
        expected = step(expected, rng)
    np.testing.assert_array_equal(out, expected)
    assert Compose(steps).random and not Compose([Normalize([0.0], [1.0])]).random
    plain = Compose([lambda x, rng: x + rng.integers(1, 2)])  # a plain callable works too
    np.testing.assert_array_equal(plain(images, 0), images + 1)


@pytest.mark.parametrize("make, error, message", [
    (lambda: RandomCrop(4, padding=-1), InvalidHyperparameterError, "padding must be an integer >= 0"),
    (lambda: RandomCrop(0), InvalidHyperparameterError, "size must be an integer >= 1"),
    (lambda: RandomCrop((3, 3, 3)), InvalidHyperparameterError, r"int or \(height, width\)"),
    (lambda: RandomCrop(2.5), InvalidHyperparameterError, "size must be an integer"),
    (lambda: RandomHorizontalFlip(1.5), InvalidHyperparameterError, r"probability in \[0, 1\]"),
    (lambda: Compose(RandomCrop(4)), D5Error, "list of transforms"),
    (lambda: Compose([RandomCrop(4), "flip"]), D5Error, "every element must be a transform"),
])
def test_bad_arguments_say_what_to_do(make, error, message):
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize("call, error, message", [
    (lambda: RandomCrop(9, padding=1)(unique_images(), 0), ShapeError, "cannot cut a 9x9 window.*padded to 8x7"),
    (lambda: RandomCrop(4)(np.zeros((3, 8, 8)), 0), ShapeError,
     r"4 dimensions\); got shape \(3, 8, 8\).*image\[None\]"),
    (lambda: RandomHorizontalFlip()([[[[1.0]]]], 0), ShapeError, "numpy array of images"),
    (lambda: RandomHorizontalFlip()(unique_images(), None), D5Error, "default_rng"),
    (lambda: RandomCrop(4)(unique_images(), -3), D5Error, "non-negative int seed"),
])
def test_bad_batches_say_what_to_do(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_a_new_transform_needs_only_apply():
    class Brighten(Transform):
        def apply(self, images, rng):
            return images + rng.random()

    images = unique_images()
    np.testing.assert_array_equal(Brighten()(images, 5), images + np.random.default_rng(5).random())
    assert d5.RandomCrop is RandomCrop and d5.Compose is Compose and d5.training.Normalize is Normalize


# --- samplers apply a transform to the input of every batch -------------------------------------------------

def image_dataset(n=50):
    return NumpyDataset(unique_images(n=n), np.arange(n, dtype=np.int64))


AUGMENT = Compose([RandomCrop(6, padding=2), RandomHorizontalFlip()])


def test_sampler_transforms_the_input_with_the_documented_generator_and_leaves_labels():
    dataset = image_dataset()
    before = dataset.data.copy()
    sampler = ShuffleSampler(dataset, batch_size=16, seed=5, transform=AUGMENT)
    sampler.set_epoch(3)
    batches = list(sampler)
    for number, (batch, indices) in enumerate(zip(batches, sampler.batch_indices(3))):
        raw = dataset[indices]
        np.testing.assert_array_equal(batch["label"], raw["label"])
        expected = AUGMENT(raw["input"], np.random.default_rng((5, 3, TRANSFORM_STREAM, number)))
        np.testing.assert_array_equal(batch["input"], expected)
    np.testing.assert_array_equal(dataset.data, before)


def test_sampler_transform_is_reproducible_per_seed_and_epoch():
    def epoch_inputs(seed, epoch):
        sampler = ShuffleSampler(image_dataset(), batch_size=16, seed=seed, transform=AUGMENT)
        sampler.set_epoch(epoch)
        return np.concatenate([b["input"] for b in sampler])

    np.testing.assert_array_equal(epoch_inputs(1, 2), epoch_inputs(1, 2))
    assert not np.array_equal(epoch_inputs(1, 2), epoch_inputs(1, 3))
    assert not np.array_equal(epoch_inputs(1, 2), epoch_inputs(2, 2))
    # Iterating gives epochs 0, 1, ...: the second pass is epoch 1, like a fresh sampler set to epoch 1.
    sampler = ShuffleSampler(image_dataset(), batch_size=16, seed=1, transform=AUGMENT)
    list(sampler)
    np.testing.assert_array_equal(np.concatenate([b["input"] for b in sampler]), epoch_inputs(1, 1))


def test_ordered_sampler_takes_a_transform_and_its_seed():
    dataset = image_dataset(10)
    normalize = Normalize([1.0, 2.0], [2.0, 4.0])
    batch = next(iter(OrderedSampler(dataset, batch_size=10, transform=normalize)))
    np.testing.assert_array_equal(batch["input"], normalize(dataset.data))
    a = next(iter(OrderedSampler(dataset, batch_size=10, seed=1, transform=AUGMENT)))["input"]
    b = next(iter(OrderedSampler(dataset, batch_size=10, seed=2, transform=AUGMENT)))["input"]
    assert not np.array_equal(a, b)


def test_without_a_transform_no_generator_is_made(monkeypatch):
    sampler = ShuffleSampler(image_dataset(), batch_size=16, seed=0)
    monkeypatch.setattr(sampler, "transform_rng", lambda *args: pytest.fail("a generator was made"))
    for batch, indices in zip(sampler, sampler.batch_indices(0)):
        np.testing.assert_array_equal(batch["input"], image_dataset()[indices]["input"])


def test_sampler_refuses_a_bad_transform():
    with pytest.raises(DatasetError, match=r"wrap a list in d5.Compose"):
        ShuffleSampler(image_dataset(), 8, transform=[RandomCrop(6, 2)])
    sampler = OrderedSampler(image_dataset(), 8, transform=lambda x, rng: None)  # edits in place, returns nothing
    with pytest.raises(DatasetError, match="returned NoneType, not a numpy array"):
        next(iter(sampler))
    with pytest.raises(DatasetError, match="seed must be an integer >= 0"):
        OrderedSampler(image_dataset(), 8, seed=-1)


# --- Cutout -------------------------------------------------------------------------------------------------

def paper_square(height, width, size, cy, cx):
    """DeVries & Taylor's cutout.py for one hole: ``np.clip(y -/+ length // 2, 0, h)``; for an odd ``size``
    d5 covers ``size`` rows (``y - size // 2`` to ``y - size // 2 + size``), the paper ``size - 1``."""
    y1, x1 = cy - size // 2, cx - size // 2
    y2, x2 = (cy + size // 2, cx + size // 2) if size % 2 == 0 else (y1 + size, x1 + size)
    mask = np.zeros((height, width), bool)
    mask[np.clip(y1, 0, height):np.clip(y2, 0, height), np.clip(x1, 0, width):np.clip(x2, 0, width)] = True
    return mask


def cutout_centre(image, out, size, value):
    """The centres whose square explains ``out`` (by brute force over every centre: the oracle)."""
    height, width = image.shape[1:]
    changed = (out != image)
    assert (changed == changed[0]).all(), "every channel must be cut at the same place"
    assert (out[changed] == value).all()
    return [(cy, cx) for cy in range(height) for cx in range(width)
            if np.array_equal(paper_square(height, width, size, cy, cx), changed[0])]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 7, 16])
def test_cutout_cuts_one_clipped_square_per_image_like_the_paper(size):
    images = unique_images(n=60, c=3, h=9, w=8)
    out = Cutout(size, value=-2.5)(images, np.random.default_rng(size))
    assert out.shape == images.shape and out.dtype == images.dtype
    for image, cut in zip(images, out):
        assert cutout_centre(image, cut, size, -2.5), "no centre gives this square"


def test_cutout_centres_are_uniform_over_the_image():
    images = unique_images(n=1, c=1, h=3, w=4).repeat(1200, axis=0)
    out = Cutout(1)(images, np.random.default_rng(11))
    centres = [tuple(np.argwhere(o[0] == 0)[0]) for o in out]
    counts = np.array([centres.count((y, x)) for y in range(3) for x in range(4)])
    assert counts.sum() == 1200
    assert ((counts - 100.0) ** 2 / 100.0).sum() < 31.3  # chi-square, 11 dof, 99.9%


def test_cutout_fills_with_zero_by_default_and_keeps_the_dtype():
    images = np.ones((4, 2, 5, 5), np.float64)
    out = Cutout(3)(images, 0)
    assert out.dtype == np.float64 and set(np.unique(out).tolist()) == {0.0, 1.0}
    assert ((out == 0).sum(axis=(1, 2, 3)) >= 2 * 4).all()  # a 3x3 square clipped to at least 2x2, 2 channels
    uint8 = Cutout(2, value=7)(np.full((2, 1, 4, 4), 200, np.uint8), 0)
    assert uint8.dtype == np.uint8 and set(np.unique(uint8).tolist()) == {7, 200}


@pytest.mark.parametrize("make, message", [
    (lambda: Cutout(0), "Cutout size must be an integer >= 1"),
    (lambda: Cutout(2.5), "Cutout size must be an integer"),
    (lambda: Cutout(4, value=float("nan")), "finite number"),
    (lambda: Cutout(4, value="black"), "finite number"),
])
def test_cutout_refuses_bad_arguments(make, message):
    with pytest.raises(InvalidHyperparameterError, match=message):
        make()


# --- every transform: never mutates its input, reproducible from the seed -----------------------------------

EVERY_TRANSFORM = {
    "crop": RandomCrop(6, padding=2), "crop-rect": RandomCrop((4, 5)), "flip": RandomHorizontalFlip(),
    "normalize": Normalize([0.5, 0.25], [2.0, 4.0]), "cutout": Cutout(3), "cutout-value": Cutout(2, value=9.0),
    "compose": Compose([RandomCrop(6, padding=2), RandomHorizontalFlip(), Normalize([0.5, 0.5], [0.2, 0.2]),
                        Cutout(2)]),
}


@pytest.mark.parametrize("name", sorted(EVERY_TRANSFORM))
def test_no_transform_mutates_its_input_and_each_is_reproducible_from_the_seed(name):
    transform = EVERY_TRANSFORM[name]
    images = unique_images()
    pristine = images.copy()
    images.flags.writeable = False  # a write would raise
    first = transform(images, np.random.default_rng(21))
    writable = pristine.copy()      # and a writable input is left as it was
    second = transform(writable, np.random.default_rng(21))
    np.testing.assert_array_equal(images, pristine)
    np.testing.assert_array_equal(writable, pristine)
    assert first.tobytes() == second.tobytes()
    assert not np.shares_memory(first, images) and not np.shares_memory(second, writable)
    if transform.random:
        others = [transform(images, np.random.default_rng(seed)) for seed in (22, 23, 24)]
        assert any(not np.array_equal(first, other) for other in others)


def test_cifar_pipeline_in_a_sampler_is_reproducible_and_leaves_the_dataset():
    data = np.random.default_rng(0).random((40, 3, 32, 32), dtype=np.float32)
    data.flags.writeable = False
    dataset = NumpyDataset(data, np.arange(40))
    cifar = Compose([RandomCrop(32, padding=4), RandomHorizontalFlip(),
                     Normalize((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)), Cutout(16)])

    def epoch(seed):
        return np.concatenate([b["input"] for b in ShuffleSampler(dataset, 16, seed=seed, transform=cifar)])

    first = epoch(3)
    assert first.shape == (40, 3, 32, 32) and first.dtype == np.float32
    assert first.tobytes() == epoch(3).tobytes() and not np.array_equal(first, epoch(4))
    assert (first == 0).all(axis=1).sum(axis=(1, 2)).min() >= 8 * 8  # a 16x16 square, clipped to >= 8x8
