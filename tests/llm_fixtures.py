"""Test fixtures for the LLM stages, built inside the tests (no downloads): a tiny randomly initialised
Llama with a word-level tokenizer, a local OpenAI-compatible completions server, and small captions files."""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.local_http import LocalHTTPServer

REAL_CAPTIONS = Path(__file__).resolve().parents[2] / "shared" / "data" / "coco" / "captions_val2017.json"
SAMPLE_CAPTIONS = Path(__file__).resolve().parents[1] / "samples" / "coco" / "captions_sample.json"


def write_captions_subset(source: Path, out: Path, n: int) -> Path:
    data = json.loads(source.read_text())
    annotations = data["annotations"][:n]
    used = {a["image_id"] for a in annotations}
    out.write_text(json.dumps({"images": [i for i in data["images"] if i["id"] in used], "annotations": annotations}))
    return out


def build_tiny_llama(folder: Path, texts: list[str], hidden: int = 32, layers: int = 2, seed: int = 0) -> Path:
    """A random Llama-architecture causal LM and a word-level tokenizer over `texts`, saved to `folder`."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers

    from pipeline.torchvision_compat import import_torchvision

    import_torchvision()  # transformers imports torchvision when installed (a CUDA build on the CPU machines)
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {t: i for i, t in enumerate(specials)}
    for text in texts:
        for word in re.findall(r"\w+|[^\w\s]", text.lower()):
            vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace()])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", pad_token="<pad>")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden, intermediate_size=hidden * 2,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=3)
    model = LlamaForCausalLM(config).eval()
    # A random model almost never picks </s>, so every output would just run to the token limit. Give </s>
    # the output weights of the token greedy decoding picks most often: outputs then end at varied lengths.
    tokenizer.padding_side = "left"
    from pipeline.llm.prompts import load_prompt

    prompts = [load_prompt(kind).text(t) for t in texts[:32] for kind in ("replace", "swap")]
    probe = tokenizer(prompts, return_tensors="pt", padding=True)
    with torch.inference_mode():
        out = model.generate(**probe, max_new_tokens=8, do_sample=False, pad_token_id=3)
    picked = torch.bincount(out[:, probe["input_ids"].shape[1] + 3:].flatten(), minlength=len(vocab))
    picked[:4] = 0
    with torch.no_grad():
        model.lm_head.weight[2] = model.lm_head.weight[int(picked.argmax())] * 1.01
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


SYNONYMS = {"man": "guy", "sitting": "seated", "large": "big", "picture": "photo", "holding": "grasping",
            "small": "little", "street": "road", "photo": "picture", "standing": "stationed", "woman": "lady"}


def _stub_answer(prompt: str) -> str:
    """What a decent chat model would say: a synonym for a known word, or the two words around "and" swapped."""
    if "Input:" in prompt:
        caption = prompt.rsplit("Input: ", 1)[1].split("\nOutput:", 1)[0]
        words = caption.split()
        for i, w in enumerate(words[1:-1], 1):
            if w == "and" and words[i - 1].isalpha() and words[i + 1].strip(".,").isalpha():
                left, right = words[i - 1], words[i + 1]
                tail = right[len(right.rstrip(".,")):]
                words[i - 1], words[i + 1] = right.rstrip(".,"), left + tail
                return " " + " ".join(words)
        return " " + caption
    caption = prompt.split("\n", 1)[1].rsplit(" [/INST]", 1)[0].rstrip("\n")
    words = caption.split()
    for i, w in enumerate(words):
        if w.lower() in SYNONYMS:
            words[i] = SYNONYMS[w.lower()]
            return " Sure! Here is the changed sentence:\n\n" + " ".join(words)
    return " " + caption


def hard_positives(out, *extra) -> list[str]:
    """The flags of a hard_positives run through the openai engine (add --llm_base_url or set OPENAI_BASE_URL)."""
    return ["--stage=hard_positives", f"--coco_captions={SAMPLE_CAPTIONS}", f"--output_dir={out}",
            "--llm_engine=openai", "--model=stub", "--positive_types=replace", "--progress_seconds=0", *extra]


def http_503(handler, server) -> None:
    handler.send_response(503)
    handler.end_headers()


def raw_reply(data: bytes, promised: int | None = None):
    """A failure: a 200 reply whose body is data (a completion of the wrong shape, not JSON); with promised, a
    Content-Length larger than data, and the connection closed after data (a body cut short)."""
    def reply(handler, server) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(promised or len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        handler.close_connection = True
    return reply


def trickle(body_only: bool):
    """A failure: the reply one byte every 0.2 s, from its status line (or, with body_only, after whole headers),
    until the client goes or the server stops: it never ends within any deadline."""
    def reply(handler, server) -> None:
        data = b'{"choices": [{"text": "' + b"a" * 10_000 + b'"}]}'
        head = f"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        if body_only:
            handler.wfile.write(head)
        else:
            data = head + data
        for i in range(len(data)):
            if server.stopping.is_set():
                return
            try:
                handler.wfile.write(data[i:i + 1])
            except OSError:  # the client gave up
                return
            time.sleep(0.2)
    return reply


def endless(handler, server) -> None:
    """A failure: a completion whose text never ends, streamed (no Content-Length) until the client goes or 64 MiB
    are sent; server.streamed counts the bytes sent."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.end_headers()
    chunk = b"a" * 2**16
    try:
        handler.wfile.write(b'{"choices": [{"text": "')
        while server.streamed < 2**26 and not server.stopping.is_set():
            handler.wfile.write(chunk)
            server.streamed += len(chunk)
        handler.wfile.write(b'"}]}')
    except OSError:  # the client gave up
        pass
    handler.close_connection = True


class CompletionsServer(LocalHTTPServer):
    """POST /v1/completions and /v1/chat/completions on 127.0.0.1; the first `fail_first` requests get `failure`
    (HTTP 503, or another of the failures above). With `gated`, every answer waits until release() (or until the
    server stops by itself, after stop_after seconds); `asked` is set at the first request."""

    def __init__(self, fail_first: int = 0, gated: bool = False, stop_after: float | None = None,
                 delay: float = 0.0, failure=http_503):
        self.requests = 0
        self.failure = failure
        self.streamed = 0  # bytes an endless reply sent
        self.delay = delay  # seconds before each answer: a model that takes its time
        self.model_lists = 0  # GET /v1/models requests
        self.auth = None  # the Authorization header of the last model list asked for
        self.paths = []  # the endpoint of each answered request
        self.queries = []  # the query string of each request ("" for none)
        self.fail_first = fail_first
        self.lock = threading.Lock()
        self.asked = threading.Event()
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # the model list, which the engine asks for before the first prompt
                server.model_lists += 1
                server.auth = self.headers.get("Authorization")
                path, _, query = self.path.partition("?")
                server.queries.append(query)
                found = path == "/v1/models"
                data = json.dumps({"object": "list", "data": [{"id": "stub", "object": "model"}]}).encode()
                self.send_response(200 if found else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data) if found else 0))
                self.end_headers()
                if found:
                    self.wfile.write(data)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.asked.set()
                while not server.gate.wait(0.1) and not server.stopping.is_set():
                    pass
                time.sleep(server.delay)
                with server.lock:
                    server.requests += 1
                    fail = server.requests <= server.fail_first
                if fail:
                    server.failure(self, server)
                    return
                path, _, query = self.path.partition("?")
                server.queries.append(query)
                if path not in ("/v1/completions", "/v1/chat/completions"):
                    self.send_response(404)
                    self.end_headers()
                    return
                server.paths.append(path)
                if path == "/v1/chat/completions":  # the server's chat template; the stub reads the message
                    text = _stub_answer(body["messages"][-1]["content"]).strip()
                    choice = {"message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                else:
                    text = _stub_answer(body["prompt"])
                    choice = {"text": text, "finish_reason": "stop"}
                reply = {"choices": [choice], "usage": {"completion_tokens": len(text.split())}}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler, stop_after)
        self.base_url = f"{self.root_url}/v1"

    def release(self):
        self.gate.set()
