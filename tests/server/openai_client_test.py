"""`lorakv serve` through the official `openai` Python client (pinned in
tools/requirements.txt): models, chat and text completions, streaming with usage, stop
strings, log-probabilities, n, cached tokens across adapters, the client's own error
types, and a graceful stop on SIGTERM while a reply streams. Loopback only.

  python tests/server/openai_client_test.py --lorakv build/cli/lorakv --model M.gguf \
      --adapter planner=PATH --adapter actor=PATH
"""
import argparse
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

import openai

ARGS = None
KEY = "test-key"
BASE = "smollm2"
SYSTEM = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer]."
QUESTION = "How old was Dok Gramein in 1940?"


def messages(question=QUESTION):
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


class Server:
    """One `lorakv serve` process on a free port; stop() sends SIGTERM."""

    def __init__(self):
        cmd = [ARGS.lorakv, "serve", "--model", ARGS.model, "--port", "0", "--api-key", KEY,
               "--model-name", BASE, "--cache-mode", "base_shared", "--cache-writer", "base",
               "--metrics", "--log-level", "warn"]
        for a in ARGS.adapter:
            cmd += ["--adapter", a]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.lines = []
        line = self.proc.stdout.readline()
        self.lines.append(line)
        match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if not match:
            self.proc.kill()
            raise RuntimeError("lorakv serve did not start: " + line)
        self.port = int(match.group(1))
        self.wait_healthy()

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def wait_healthy(self):
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url("/health"), timeout=5) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass  # 503 while loading, or not listening yet
            time.sleep(0.1)
        raise RuntimeError("lorakv serve never became healthy")

    def stop(self, timeout=30):
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=timeout)
        self.lines.append(out)
        return self.proc.returncode


class OpenAiClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        cls.client = openai.OpenAI(base_url=cls.server.url("/v1"), api_key=KEY, max_retries=0, timeout=120)

    @classmethod
    def tearDownClass(cls):
        if cls.server.proc.poll() is None:
            cls.server.proc.kill()

    def chat(self, **kw):
        args = dict(model="planner", messages=messages(), max_tokens=10, temperature=0)
        args.update(kw)
        return self.client.chat.completions.create(**args)

    def test_models_list_the_base_and_the_adapters(self):
        models = {m.id: m for m in self.client.models.list()}
        self.assertEqual(set(models), {BASE, "planner", "actor"})
        self.assertIsNone(models[BASE].model_extra.get("parent"))
        self.assertEqual(models["planner"].model_extra.get("parent"), BASE)

    def test_chat_completion(self):
        r = self.chat()
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, "planner")
        self.assertEqual(r.choices[0].message.role, "assistant")
        self.assertTrue(r.choices[0].message.content)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        self.assertLessEqual(r.usage.completion_tokens, 10)

    def test_text_completion_streamed_equals_whole(self):
        args = dict(model="actor", prompt="The capital of France is", max_tokens=6, temperature=0)
        whole = self.client.completions.create(**args)
        self.assertEqual(whole.object, "text_completion")
        text = "".join(c.choices[0].text for c in self.client.completions.create(stream=True, **args) if c.choices)
        self.assertEqual(text, whole.choices[0].text)

    def test_streaming_with_usage(self):
        whole = self.chat()
        chunks = list(self.chat(stream=True, stream_options={"include_usage": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, whole.choices[0].message.content)
        finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finish, [whole.choices[0].finish_reason])
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, whole.usage.completion_tokens)

    def test_stop_strings_end_the_text(self):
        full = self.chat(max_tokens=24).choices[0].message.content
        self.assertGreater(len(full), 8, full)
        stop = full[len(full) // 2:len(full) // 2 + 3]
        expected = full[:full.index(stop)]
        r = self.chat(max_tokens=24, stop=[stop])
        self.assertEqual(r.choices[0].message.content, expected)
        self.assertEqual(r.choices[0].finish_reason, "stop")
        streamed = "".join(c.choices[0].delta.content or "" for c in self.chat(max_tokens=24, stop=stop, stream=True)
                           if c.choices)
        self.assertEqual(streamed, expected)

    def test_logprobs(self):
        r = self.chat(model="actor", max_tokens=5, logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        self.assertTrue(content)
        for entry in content:
            self.assertTrue(math.isfinite(entry.logprob))
            self.assertLessEqual(entry.logprob, 0.0)
            self.assertEqual(len(entry.top_logprobs), 2)
            self.assertGreaterEqual(entry.top_logprobs[0].logprob, entry.logprob - 1e-4)

    def test_n_replies(self):
        r = self.chat(n=3, temperature=0.9, seed=11, max_tokens=6)
        self.assertEqual([c.index for c in r.choices], [0, 1, 2])
        again = self.chat(n=3, temperature=0.9, seed=11, max_tokens=6)
        self.assertEqual([c.message.content for c in again.choices], [c.message.content for c in r.choices])

    def test_cached_tokens_on_a_repeat_and_on_a_second_adapter(self):
        question = "Who is the mayor of the city where Thou Futrel lives?"
        first = self.chat(model="planner", messages=messages(question), max_tokens=2)
        repeat = self.chat(model="planner", messages=messages(question), max_tokens=2)
        other = self.chat(model="actor", messages=messages(question), max_tokens=2)
        self.assertEqual(first.usage.prompt_tokens, repeat.usage.prompt_tokens)
        self.assertGreater(repeat.usage.prompt_tokens_details.cached_tokens, 0)
        # Writer `base`: the history's rows are the base model's, shared by every adapter.
        self.assertGreater(other.usage.prompt_tokens_details.cached_tokens, other.usage.prompt_tokens // 2)

    def test_errors_are_the_clients_own_types(self):
        with self.assertRaises(openai.NotFoundError):
            self.chat(model="no-such-adapter")
        with self.assertRaises(openai.BadRequestError) as bad:
            self.chat(temperature=5)
        self.assertIn("temperature", str(bad.exception))
        with self.assertRaises(openai.BadRequestError):
            self.chat(stream_options={"include_usage": True})
        with self.assertRaises(openai.BadRequestError):
            self.client.completions.create(model="actor", prompt="", max_tokens=2)
        wrong = openai.OpenAI(base_url=self.server.url("/v1"), api_key="wrong", max_retries=0)
        with self.assertRaises(openai.AuthenticationError):
            wrong.models.list()
        self.assertTrue(self.chat(max_tokens=2).choices[0].message.content is not None, "still serving")

    def test_zz_sigterm_lets_a_streaming_reply_finish(self):
        # Runs last (unittest sorts by name): the server stops here.
        stream = self.chat(max_tokens=30, stream=True, extra_body={"ignore_eos": True})
        first = next(iter(stream))
        self.assertEqual(first.choices[0].delta.role, "assistant")
        code = {}
        stopper = threading.Thread(target=lambda: code.setdefault("rc", self.server.stop()))
        stopper.start()
        chunks = list(stream)
        stopper.join(timeout=60)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length", "the reply ran to its end")
        self.assertEqual(code.get("rc"), 0)
        self.assertIn("SIGTERM", "".join(self.server.lines))


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--lorakv", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--adapter", action="append", default=[])
    ARGS, rest = parser.parse_known_args()
    os.environ["NO_PROXY"] = "127.0.0.1,localhost"  # never a proxy: loopback only
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
