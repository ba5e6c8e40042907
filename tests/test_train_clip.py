"""open_clip through pipeline.train.clip: torchvision without its compiled ops on CPU-only machines, models,
checkpoints."""
import pytest
import torch

from pipeline.torchvision_compat import import_torchvision
from pipeline.train.clip import create, import_open_clip


def test_torchvision_imports_and_its_compiled_ops_either_work_or_say_they_cannot_load():
    torchvision = import_torchvision()
    from torchvision.transforms import CenterCrop, Compose, Normalize, Resize, ToTensor

    assert callable(Compose([Resize(8), CenterCrop(8), ToTensor(), Normalize((0.5,) * 3, (0.5,) * 3)]))
    boxes, scores = torch.tensor([[0.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 1.0]]), torch.tensor([0.9, 0.8])
    if torchvision.extension._has_ops():  # a matching (GPU machine) build: the real op
        assert torchvision.ops.nms(boxes, scores, 0.5).tolist() == [0]
    else:  # the CPU machines: CLIP never needs it, and a caller gets torchvision's own error
        with pytest.raises(RuntimeError, match="Couldn't load custom C"):
            torchvision.ops.nms(boxes, scores, 0.5)
    assert import_torchvision() is torchvision  # a second call changes nothing


def test_the_tiny_config_builds_encodes_and_round_trips_through_a_checkpoint(tmp_path):
    open_clip = import_open_clip()
    assert "hardpos-tiny" in open_clip.list_models()
    model, train_transform, eval_transform, tokenizer = create("hardpos-tiny", None)
    from PIL import Image

    image = eval_transform(Image.new("RGB", (50, 40), (200, 30, 30))).unsqueeze(0)
    with torch.no_grad():
        assert model.encode_image(image).shape == (1, 32)
        assert model.encode_text(tokenizer(["a red square", "a cat"])).shape == (2, 32)
    torch.save({"model": model.state_dict()}, tmp_path / "ck.pt")
    again, *_ = create("hardpos-tiny", str(tmp_path / "ck.pt"))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(),
                                                   strict=True))
    other, *_ = create("hardpos-tiny", "")
    assert not all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values(),
                                                       strict=True))


def test_an_unknown_model_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown open_clip model"):
        create("ViT-Q-99", None)


def test_the_activation_travels_with_the_weights(tmp_path):
    from pipeline.train.clip import uses_quick_gelu

    assert not uses_quick_gelu(create("hardpos-tiny", None)[0])  # the config's own activation
    import_open_clip()
    from open_clip import create_model

    trained_quick = create_model("hardpos-tiny", pretrained=None, force_quick_gelu=True)
    assert uses_quick_gelu(trained_quick)
    torch.save({"model": trained_quick.state_dict(), "quick_gelu": True}, tmp_path / "quick.pt")
    torch.save({"model": trained_quick.state_dict()}, tmp_path / "bare.pt")
    assert uses_quick_gelu(create("hardpos-tiny", str(tmp_path / "quick.pt"))[0])
    assert not uses_quick_gelu(create("hardpos-tiny", str(tmp_path / "bare.pt"))[0])
