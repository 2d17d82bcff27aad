"""A multi-layer perceptron on scikit-learn's 8x8 handwritten digits with momentum SGD on the reference
framework, with final test accuracy as the acceptable metric: a real benchmark that needs no download and
runs in seconds.

Data: ``d5.datasets.load('digits')`` (:mod:`d5.datasets.digits`): the 1,797 images of scikit-learn's
``load_digits``, split per class with seed 0 into 1,438 training and 359 test images, pixels scaled to [0, 1]
and standardized with the training split's mean and standard deviation.

Model and training: :func:`d5.models.mlp` on the flattened 8x8 input with one hidden layer of 256 ReLU
units (19,210 parameters); SGD with momentum 0.9, learning rate 0.05 on batches of 32, divided by 10 for the
last 5 of 20 epochs.

Source of the metric: scikit-learn's example "Recognizing hand-written digits"
(``examples/classification/plot_digits_classification.py``, https://scikit-learn.org/stable/auto_examples/
classification/plot_digits_classification.html) trains ``svm.SVC(gamma=0.001)`` on the first half of these
digits and prints a classification report with accuracy 0.97 on the other half (899 images; 96.9% when run
with scikit-learn 1.x). The threshold, 97.0% test accuracy, is that published figure. The split here is an
easier one -- a stratified random 20% of each class rather than the second half of the file --
on which the same SVC reaches 99.4% and scikit-learn's ``MLPClassifier()`` 98.1-98.3% (seeds 0-2), so
97.0% asks the MLP for at least the accuracy scikit-learn's documentation shows. Measured here (2 CPU cores):
seeds 0-9 give 97.8-98.3% (median 98.05%) on the reference framework, about one standard error of a
359-image test (0.9 points at 97%) above the threshold; seed 0 gives 98.33% on the reference framework and
on PyTorch alike, in 0.35 s and 0.41 s of training (1.6 s and 4.4 s for the whole process).

    python recipes/digits_mlp.py                           # the benchmark (seconds)
    d5 run digits_mlp --framework pytorch                  # the same on PyTorch (torch.optim.SGD)
    d5 run digits_mlp --epochs 1 --subset 200              # a smoke test (misses 97%: exit 1)
"""
import d5
import d5.frameworks.reference as d5fw

EPOCHS = 20
LEARNING_RATE = 0.05
DECAY_EPOCHS = 5


def learning_rate(epoch):
    """0.05, divided by 10 for the last 5 of the 20 epochs."""
    return LEARNING_RATE * (0.1 if epoch >= EPOCHS - DECAY_EPOCHS else 1.0)


# Fixed components
FIXED = {
    "model": "mlp",
    "model_kwarg": dict(input_shape=(1, 8, 8), hidden=(256,), num_classes=10),
    "dataset": "digits",
    "train_sampler": d5.ShuffleSampler,
    "validation_sampler": d5.OrderedSampler,
    "epochs": EPOCHS,
}

# Mutable components
MUTABLE = {
    "batch_size": 32,
    "executor": d5fw.from_model,
    "optimizer": d5fw.MomentumOptimizer,
    "optimizer_args": (LEARNING_RATE, 0.9),
    "events": [d5.LearningRateSchedule(learning_rate)],
}

# Acceptable metrics (None: reported, not required)
METRICS = [
    (d5.TestAccuracy(), 97.0),
    (d5.WallclockTime(), None),
    (d5.Throughput(), None),
]

if __name__ == "__main__":
    d5.run_recipe(FIXED, MUTABLE, METRICS) or exit(1)
