"""Redaction before sealing (toolreplay.policy.redaction): secrets replaced by a keyed hash in the record
and the intents, equal secrets equal, the record still verifies and replays."""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
import tempfile
import unittest

from tests.test_cli import run
from toolreplay.format.records import read_session
from toolreplay.guard.gate import Gate
from toolreplay.guard.recorder import SessionRecorder
from toolreplay.policy.model import parse_policy
from toolreplay.policy.redaction import Redactor, parse_redaction

KEY = b"a key of at least sixteen bytes"
# Real-looking secrets of each kind (none of them valid anywhere).
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_" + "Z8x" * 12
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
BEARER = "mF_9.B5f-4.1JqM0987654321abcdef"
EMAIL = "jane.doe@example.org"
PRIVATE = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"
SECRETS = (AWS_KEY, AWS_SECRET, GITHUB, JWT, BEARER, EMAIL, PRIVATE, "hunter2", "TCK-123456")


def _redactor(section: object = None) -> Redactor:
    return Redactor(parse_redaction(section if section is not None else {
        "fields": ["headers.X-Session", "response.session"], "patterns": [{"name": "ticket", "regex": "TCK-[0-9]{6}"}]}),
        KEY)


class RedactorTest(unittest.TestCase):
    def test_every_kind_is_replaced_and_the_rest_kept(self) -> None:
        args = {"q": f"mail {EMAIL} about TCK-123456", "key": AWS_KEY, "cfg": f"aws_secret_access_key={AWS_SECRET}",
                "gh": GITHUB, "jwt": JWT, "headers": {"Authorization": f"Bearer {BEARER}", "X-Session": 42},
                "pem": PRIVATE, "password": "hunter2", "n": 5, "ok": True, "list": [EMAIL, 1]}
        redacted = _redactor().args(args)
        text = repr(redacted)
        for secret in SECRETS:
            self.assertNotIn(secret, text)
        self.assertEqual((redacted["n"], redacted["ok"], redacted["list"][1]), (5, True, 1))
        self.assertRegex(redacted["q"], r"^mail \[redacted:email:[0-9a-f]{24}\] about \[redacted:ticket:[0-9a-f]{24}\]$")
        self.assertRegex(redacted["cfg"], r"^aws_secret_access_key=\[redacted:aws-secret-key:[0-9a-f]{24}\]$")
        self.assertRegex(redacted["headers"]["X-Session"], r"^\[redacted:field:[0-9a-f]{24}\]$")
        self.assertRegex(redacted["headers"]["Authorization"], r"^\[redacted:field:")  # a secret field name

    def test_equal_secrets_give_equal_text_other_secrets_and_keys_other_text(self) -> None:
        redactor = _redactor()
        first, second = redactor.args({"a": EMAIL}), redactor.args({"b": f"to: {EMAIL}"})
        self.assertEqual(first["a"], second["b"][4:])
        self.assertNotEqual(first, redactor.args({"a": "john.doe@example.org"}))
        self.assertNotEqual(first, Redactor(parse_redaction({}), b"another key, 16 bytes").args({"a": EMAIL}))

    def test_secret_field_names_match_in_every_case_style(self) -> None:
        # each built-in secret name, and a name of the policy's own, written in each case style a tool may use
        styles = {
            "access_token": ("accessToken", "AccessToken", "access_token", "access-token", "ACCESS_TOKEN",
                             "Access-Token", "ACCESSTOKEN", "Access_Token"),
            "client_secret": ("clientSecret", "ClientSecret", "client-secret", "CLIENT_SECRET"),
            "refresh_token": ("refreshToken", "RefreshToken", "refresh-token", "REFRESH_TOKEN"),
            "private_key": ("privateKey", "PrivateKey", "private-key", "PRIVATE_KEY"),
            "auth_token": ("authToken", "AuthToken", "auth-token", "AUTH_TOKEN"),
            "id_token": ("idToken", "IdToken", "IDToken", "id-token", "ID_TOKEN"),
            "api_key": ("apiKey", "ApiKey", "APIKey", "api-key", "API_KEY", "apikey", "x-api-key", "X-API-Key",
                        "xApiKey"),
            "set_cookie": ("setCookie", "Set-Cookie", "SET_COOKIE"),
            "password": ("Password", "PASSWORD", "passWORD"),
            "pin_code": ("pinCode", "PinCode", "pin-code", "PIN_CODE"),  # the policy's own `fields`
        }
        redactor = _redactor({"fields": ["pin_code", "headers.x_session"]})
        for name, spellings in styles.items():
            for spelling in spellings:
                with self.subTest(name=name, spelling=spelling):
                    self.assertRegex(redactor.args({spelling: "v4lue"})[spelling], r"^\[redacted:field:[0-9a-f]{24}\]$")
                    self.assertRegex(redactor.response({"data": [{spelling: 7}]})["data"][0][spelling],
                                     r"^\[redacted:field:[0-9a-f]{24}\]$")
        for spelling in ("x-session", "X-Session", "xSession", "X_SESSION"):  # a path's names too
            with self.subTest(path=spelling):
                self.assertRegex(redactor.args({"Headers": {spelling: "v"}})["Headers"][spelling], r"^\[redacted:field:")
        # names that only contain a secret name are not secret names
        kept = {"tokens_used": 3, "tokenizer": "bpe", "passwordless": True, "secretary": "Ann", "author": "Bo",
                "session": "s1", "key": "k", "x_session": "kept: not under headers"}
        self.assertEqual(redactor.args(kept), kept)

    def test_marks_keep_the_json_type_apart(self) -> None:
        redactor = _redactor({"builtin": False, "fields": ["pin"]})

        def mark(value: object) -> str:
            result = redactor.args({"pin": value})["pin"]
            assert isinstance(result, str)
            return result

        # a string's mark is the keyed hash of its text, as the record format has always had it
        text = hmac.new(KEY, b"1234", hashlib.sha256).hexdigest()[:24]
        self.assertEqual(mark("1234"), f"[redacted:field:{text}]")
        for value, other in (("1234", 1234), ("1234", 1234.0), ("true", True), ("null", None), ("1.5", 1.5),
                             ('{"a":1}', {"a": 1}), ("[1]", [1]), ('"1234"', "1234")):
            with self.subTest(value=value, other=other):
                self.assertNotEqual(mark(value), mark(other))
                self.assertRegex(mark(other), r"^\[redacted:field:[0-9a-f]{24}\]$")
        self.assertEqual(mark(1234), mark(1234.0))  # canonically equal values: one mark
        self.assertEqual(mark({"b": 2, "a": 1}), mark({"a": 1, "b": 2}))

    def test_a_text_that_looks_like_a_mark_is_no_mark_on_record(self) -> None:
        # a call quoting the mark of another call's secret must not redact to that call's form
        redactor = _redactor({"builtin": ["api-key"]})
        secret = "sk-" + "Q" * 30
        real = redactor.args({"q": f"key {secret}"})["q"]
        self.assertRegex(real, r"^key \[redacted:api-key:[0-9a-f]{24}\]$")
        quoted = redactor.args({"q": real})["q"]
        self.assertRegex(quoted, r"^key \[redacted:mark:[0-9a-f]{24}\]$")
        self.assertNotEqual(quoted, real)
        self.assertEqual(redactor.args({"q": "[redacted:nothing] [redacted:x:123]"}),
                         {"q": "[redacted:nothing] [redacted:x:123]"})  # not a mark's shape: kept
        self.assertEqual(Redactor(parse_redaction({"builtin": False}), KEY).args({"q": real})["q"], quoted)

    def test_paths_builtin_choice_and_bad_sections(self) -> None:
        redactor = _redactor({"builtin": ["email"], "fields": ["response.session"]})
        self.assertEqual(redactor.args({"key": AWS_KEY, "password": "x"}), {"key": AWS_KEY, "password": "x"})
        self.assertRegex(redactor.response({"session": {"id": 1}})["session"], r"^\[redacted:field:")
        self.assertEqual(redactor.args({"session": "kept: only the response's is named"})["session"],
                         "kept: only the response's is named")
        for section, message in (
                ([], 'field "redact" must be an object'),
                ({"other": 1}, 'field "redact" has an unknown field "other"'),
                ({"builtin": ["nope"]}, 'field "redact.builtin": unknown pattern "nope"'),
                ({"fields": ["a..b"]}, 'field "redact.fields" item 0 must be a field name or a dotted path'),
                ({"fields": ["pin", "a.-"]}, 'field "redact.fields" item 1 must be a field name or a dotted path'),
                ({"fields": [""]}, 'field "redact.fields" item 0 must be a field name or a dotted path'),
                ({"fields": [3]}, 'field "redact.fields" item 0 must be a field name or a dotted path'),
                ({"patterns": [{"name": "x", "regex": "(\\w+\\s?)+"}]}, 'field "redact.patterns" item 0: the regex '),
                ({"patterns": [{"name": "X", "regex": "a"}]}, "name must be lower-case letters, digits and -")):
            with self.subTest(message), self.assertRaises(ValueError) as caught:
                parse_redaction(section)
            self.assertIn(message, str(caught.exception))
        with self.assertRaises(ValueError):
            Redactor(parse_redaction({}), b"short")

    def test_a_policy_carries_its_section(self) -> None:
        policy = parse_policy({"agent": "a", "allowed_tools": ["t"], "redact": {"builtin": False, "fields": ["pin"]}})
        self.assertEqual(policy.redact.names if policy.redact else None, frozenset({"pin"}))


class RecordTest(unittest.TestCase):
    def setUp(self) -> None:
        self.folder = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.folder)

    def test_no_secret_byte_reaches_the_record_or_the_intents(self) -> None:
        path = os.path.join(self.folder, "s.jsonl")
        args = {"to": EMAIL, "body": f"token {GITHUB} and {JWT}", "auth": {"Authorization": f"Bearer {BEARER}"}}
        with SessionRecorder.open(path, sealed=True, redactor=_redactor()) as recorder:
            intent = recorder.announce("send", args)
            with open(recorder.intents_path, "rb") as handle:
                intents = handle.read()
            recorder.append("send", args, {"echo": args["body"], "aws": AWS_KEY}, intent=intent)
            recorder.append("send", args, {"echo": args["body"], "aws": AWS_KEY})
        with open(path, "rb") as handle:
            record = handle.read()
        for secret in (EMAIL, GITHUB, JWT, BEARER, AWS_KEY):
            self.assertNotIn(secret.encode(), record)
            self.assertNotIn(secret.encode(), intents)
        self.assertEqual(run("verify", path), (0, "chain: intact\n", ""))
        code, out, _ = run("replay", path)
        self.assertEqual(code, 1)  # the same call twice, the same redacted form: still seen as a repeat
        self.assertIn("index 1: redundant-call", out)

    def test_calls_that_differ_in_type_or_quote_a_mark_each_run(self) -> None:
        policy = parse_policy({"agent": "a", "allowed_tools": ["set_pin"], "write_tools": ["set_pin"],
                               "redact": {"fields": ["pin"]}})
        assert policy.redact is not None
        redactor = Redactor(policy.redact, KEY)
        ran: list[dict[str, object]] = []

        def set_pin(**args: object) -> dict[str, object]:
            ran.append(args)
            return {"ok": True, "n": len(ran)}

        secret = {"note": "key sk-" + "Q" * 30}
        calls = [{"pin": "1234"}, {"pin": 1234}, secret, redactor.args(secret)]  # the last quotes the third's mark
        with SessionRecorder.open(os.path.join(self.folder, "s.jsonl"), sealed=True, redactor=redactor) as recorder:
            gate = Gate({"set_pin": set_pin}, policy, recorder=recorder, confirm=lambda tool, args: True)
            answers = [gate.call("set_pin", args) for args in [*calls, *calls]]
        self.assertEqual(ran, calls)  # each ran once, and its repeat was answered from it alone
        self.assertEqual(answers, [{"ok": True, "n": n} for n in (1, 2, 3, 4, 1, 2, 3, 4)])

    def test_a_repeated_write_gets_the_real_answer_or_a_refusal_never_the_redacted_text(self) -> None:
        policy = parse_policy({"agent": "a", "allowed_tools": ["mint", "rename"], "write_tools": ["mint", "rename"],
                               "redact": {}})
        assert policy.redact is not None
        redactor = Redactor(policy.redact, KEY)
        path = os.path.join(self.folder, "s.jsonl")
        ran: list[str] = []
        mark_like = redactor.args({"q": "sk-" + "M" * 30})["q"]
        tools = {"mint": lambda name: ran.append(name) or {"name": name, "key": "sk-" + name * 24},
                 "rename": lambda name: ran.append(name) or {"name": name, "note": mark_like if name == "q" else ""}}

        def gate(recorder: SessionRecorder, remember_bytes: int = 1 << 20) -> Gate:
            return Gate(tools, policy, recorder=recorder, confirm=lambda tool, args: True, remember_bytes=remember_bytes)

        refusal = {"ok": False, "error": "already ran: an identical mint call ran earlier; its answer is no longer "
                                         "held in memory, and the record holds it only redacted"}
        with SessionRecorder.open(path, sealed=True, redactor=redactor) as recorder:
            first = gate(recorder)
            self.assertEqual(first.call("mint", {"name": "a"}), {"name": "a", "key": "sk-" + "a" * 24})
            # held in memory for the life of the gate: the repeat gets the real answer
            self.assertEqual(first.call("mint", {"name": "a"}), {"name": "a", "key": "sk-" + "a" * 24})
            self.assertEqual(first.call("rename", {"name": "b"}), {"name": "b", "note": ""})
            self.assertEqual(first.call("rename", {"name": "q"}), {"name": "q", "note": mark_like})
            # a gate whose memory is too small for the answer: only the redacted record is left
            small = gate(recorder, remember_bytes=1)
            self.assertEqual(small.call("mint", {"name": "c"}), {"name": "c", "key": "sk-" + "c" * 24})
            self.assertEqual(small.call("mint", {"name": "d"}), {"name": "d", "key": "sk-" + "d" * 24})
            self.assertEqual(small.call("mint", {"name": "c"}), refusal)
        self.assertEqual(ran, ["a", "b", "q", "c", "d"])
        with SessionRecorder.open(path, sealed=True, redactor=redactor) as recorder:  # the host starts again
            again = gate(recorder)
            self.assertEqual(again.call("mint", {"name": "a"}), refusal)  # its answer held a secret: not run, refused
            self.assertEqual(again.call("rename", {"name": "b"}), {"name": "b", "note": ""})  # none: the record's is it
            self.assertEqual(again.call("rename", {"name": "q"}), {  # its answer had a mark's shape: it cannot tell
                "ok": False, "error": refusal["error"].replace("mint", "rename")})
        self.assertEqual(ran, ["a", "b", "q", "c", "d"])
        with open(path, "rb") as handle:
            outcomes = [record.meta["outcome"] if record.meta else None for record in read_session(handle, path)]
        self.assertEqual(outcomes, ["ran", "cached", "ran", "ran", "ran", "ran", "refused", "refused", "cached",
                                    "refused"])
