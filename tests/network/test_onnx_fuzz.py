"""Property: whatever damage is done to a valid ONNX model, importing it (and building the reference
executor on the result) raises only d5 errors: never a protobuf, numpy or KeyError traceback."""
import functools

import numpy as np
import onnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import AttributeProto, helper

import d5
from d5.errors import D5Error
from d5.frameworks import reference
from d5.models.builder import NetworkBuilder


@functools.lru_cache(maxsize=None)
def valid_models() -> tuple[bytes, ...]:
    """Small valid models (small weights, so byte damage lands on structure as often as on data)."""
    b = NetworkBuilder("tiny_cnn", input_shape=(1, 6, 6), num_classes=3, seed=0)
    x = b.max_pool(b.relu(b.conv(b.input, 2, kernel=3, pad=1)), 2)
    cnn = b.classifier(b.linear(b.flatten(x), 3))
    b = NetworkBuilder("tiny_mlp", input_shape=(4,), num_classes=2, seed=1)
    mlp = b.classifier(b.linear(b.relu(b.linear(b.input, 5)), 2))
    return tuple(net.to_onnx().SerializeToString() for net in (cnn, mlp))


def import_and_build(data) -> None:
    try:
        network = d5.Network.from_onnx(data)
        reference.from_model(network)
    except D5Error:
        pass  # the expected way for damaged input to fail; anything else propagates and fails the test


def drop_node(model, draw) -> None:
    del model.graph.node[draw(st.integers(0, len(model.graph.node) - 1))]


def rename_input(model, draw) -> None:
    node = model.graph.node[draw(st.integers(0, len(model.graph.node) - 1))]
    if len(node.input):
        node.input[draw(st.integers(0, len(node.input) - 1))] = draw(st.sampled_from(["", "nowhere", "label", "output"]))


SWAPPED_VALUES = [1, 2.5, "text", [1, 2], [0.5], ["a"], np.array([1.0], np.float32), []]


def swap_attribute_type(model, draw) -> None:
    with_attributes = [node for node in model.graph.node if len(node.attribute)]
    if not with_attributes:
        return
    node = draw(st.sampled_from(with_attributes))
    index = draw(st.integers(0, len(node.attribute) - 1))
    value = draw(st.sampled_from(range(len(SWAPPED_VALUES))))
    name = node.attribute[index].name
    replacement = SWAPPED_VALUES[value]
    if isinstance(replacement, np.ndarray):
        attribute = helper.make_attribute(name, onnx.numpy_helper.from_array(replacement))
    elif isinstance(replacement, list) and not replacement:
        attribute = helper.make_attribute(name, [], attr_type=AttributeProto.FLOATS)
    else:
        attribute = helper.make_attribute(name, replacement)
    node.attribute[index].CopyFrom(attribute)


STRUCTURAL = {"drop_node": drop_node, "rename_input": rename_input, "swap_attribute_type": swap_attribute_type}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_models_raise_only_d5_errors(data):
    original = data.draw(st.sampled_from(valid_models()), label="model")
    kind = data.draw(st.sampled_from(["truncate", "corrupt", *STRUCTURAL]), label="mutation")
    if kind == "truncate":
        damaged = original[: data.draw(st.integers(0, len(original) - 1))]
    elif kind == "corrupt":
        buffer = bytearray(original)
        for _ in range(data.draw(st.integers(1, 8))):
            buffer[data.draw(st.integers(0, len(buffer) - 1))] = data.draw(st.integers(0, 255))
        damaged = bytes(buffer)
    else:
        model = onnx.ModelProto.FromString(original)
        STRUCTURAL[kind](model, data.draw)
        damaged = model if data.draw(st.booleans()) else model.SerializeToString()
    import_and_build(damaged)


def test_the_unmutated_models_import():
    for data in valid_models():
        reference.from_model(d5.Network.from_onnx(data))
