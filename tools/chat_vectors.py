"""chat_vectors.py — the chat-template vectors (vectors/chat, M3-CHAT-*).

  /usr/bin/python3 tools/chat_vectors.py --out vectors/chat --template FILE
        write the conversations (cases/NAME.json), the template's renderings
        (expected/NAME.txt) and manifest.json
  /usr/bin/python3 tools/chat_vectors.py --check vectors/chat [--template FILE]
        rewrite the conversations and the manifest in a temp dir and compare
        bytes; with the template also re-render every case with jinja2 and
        compare with expected/

FILE is the published MiniMax-M3 chat template (docs/tokenizer.md: where it
comes from, why it is not committed, its SHA-256). It is rendered as
transformers renders chat templates: jinja2's ImmutableSandboxedEnvironment
with trim_blocks and lstrip_blocks, the loopcontrols extension, a tojson
filter that is json.dumps (ensure_ascii=False, insertion order, no HTML
escaping) and a raise_exception global. A case's file is read with json.load
and passed as the template's variables: messages, and tools, thinking_mode,
model_identity when the file has them; add_generation_prompt defaults to true.

Each case names the template branches it takes (BRANCHES); the script fails
when a branch has no case. Cases of kind "error" make the template raise;
cases of kind "reject" render in the template but are refused by m3
(M3-CHAT-REJECT-1: the template would drop the input or print a Python repr).
For both, manifest.json gives the field m3's message must name.
Needs python3-jinja2 (Debian) for --out and for --check with --template.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile

# SHA-256 of the template text with LF line ends (the copy read has CRLF;
# jinja2 normalises line ends, so both render the same).
TEMPLATE_SHA256_LF = "11421244f67553498e5c8112dae02802025bcc4305ec45ad380af95c96f9fe64"
TEMPLATE_CHARS_CRLF = 11999

BRANCHES = {
    "sys.root": "messages[0] is root: its content is the system turn's text",
    "sys.root_empty": "root with empty content: the default identity text",
    "sys.default": "no root message: the default identity text",
    "sys.list": "a system/developer turn's content given as a list of parts",
    "dev.after_root": "root followed by a system/developer message: the developer turn",
    "dev.system": "messages[0] is system: the developer turn",
    "dev.developer": "messages[0] is developer: the developer turn",
    "dev.default": "no system/developer message: You are a helpful assistant.",
    "dev.empty": "a system/developer message with empty content: the default",
    "dev.model_identity": "model_identity given and no developer content",
    "think.undefined": "thinking_mode not given",
    "think.enabled": "thinking_mode enabled",
    "think.disabled": "thinking_mode disabled",
    "think.adaptive": "thinking_mode adaptive",
    "think.other": "thinking_mode another string (no mode line; m3 rejects)",
    "gen.on": "add_generation_prompt true",
    "gen.off": "add_generation_prompt false",
    "tools.none": "no tools",
    "tools.empty": "an empty tools list (no tools block)",
    "tools.some": "tools written as json.dumps of each function",
    "tools.json_edge": "tool schemas with unicode, escapes, floats, large ints, nested values",
    "vis.string": "content as a string",
    "vis.list_text": "content list: text parts",
    "vis.list_string": "content list: bare string items",
    "vis.image": "content list: image parts",
    "vis.video": "content list: video parts",
    "vis.none": "content null",
    "vis.absent": "content absent",
    "vis.other_item": "content list item of another type (dropped by the template; m3 rejects)",
    "vis.other": "content of another JSON type (printed as Python str; m3 rejects)",
    "ai.reasoning": "reasoning_content a non-empty string",
    "ai.reasoning_empty": "reasoning_content the empty string (no split of the content)",
    "ai.split": "no reasoning_content, </mm:think> in the content: split",
    "ai.split_multi": "the split with several <mm:think> / </mm:think> and newlines to strip",
    "ai.split_empty": "the split gives empty reasoning: </mm:think> alone",
    "ai.plain": "no reasoning: </mm:think> prefix",
    "ai.empty": "empty assistant content",
    "ai.calls_function": "tool calls given as {function: {name, arguments}}",
    "ai.calls_flat": "tool calls given as {name, arguments}",
    "ai.calls_many": "several tool calls in one message",
    "ai.calls_empty": "tool_calls an empty list",
    "xml.nested": "arguments with nested objects and arrays",
    "xml.null_skip": "null members skipped (top level and nested), null list items empty",
    "xml.scalars": "booleans, integers, floats and strings in arguments",
    "tool.single": "one tool result",
    "tool.merged": "consecutive tool results in one ]~b]tool turn",
    "tool.parts": "tool result content as a list: image, video, output, text, string",
    "tool.absent": "tool result without content",
    "tool.last": "a tool result last in the conversation",
    "tool.after_user": "a tool result after a user message that follows the call",
    "tool.no_call": "a tool result without an earlier tool call (the template raises)",
    "tool.reset": "a tool result after an assistant message without calls (the template raises)",
    "tool.null": "a tool result with null content (jinja2 fails)",
    "role.dropped": "system/developer later in the conversation (dropped by the template; m3 rejects)",
    "role.unknown": "an unknown role (dropped by the template; m3 rejects)",
    "msgs.empty": "no messages",
}

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "search", "description": "Search the web.",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"}, "top_k": {"type": "integer", "minimum": 1, "maximum": 20,
                                               "default": 5}},
        "required": ["query"]}}}
EDGE = {"type": "function", "function": {
    "name": "edge_tool", "description": "Ünïcode — 中文 ✓ \"quoted\" back\\slash\ttab\nnewline \u0001 \u007f",
    "parameters": {"type": "object", "properties": {
        "x": {"type": "number", "minimum": -0.0, "maximum": 1e16, "multipleOf": 0.1,
              "default": 1.0, "examples": [1e-05, 0.0001, 123456789012345678901234567890,
                                           2.5e-300, 1.7976931348623157e308, 100.0, 12345.678]},
        "flag": {"type": "boolean", "default": False}, "nothing": None, "empty": {}, "list": []},
        "required": []}}}

CALL_W = {"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
CALL_S = {"name": "search", "arguments": {"query": "MiniMax M3", "top_k": 3}}

U = lambda t: {"role": "user", "content": t}  # noqa: E731
A = lambda t, **k: dict({"role": "assistant", "content": t}, **k)  # noqa: E731
T = lambda t: {"role": "tool", "content": t}  # noqa: E731

# name -> (conversation file, kind, branches, field named by m3's error)
CASES = {}


def case(name, conv, branches, kind="text", field=None):
    assert name not in CASES, name
    for b in branches:
        assert b in BRANCHES, b
    CASES[name] = (conv, kind, branches, field)


case("single_user_default", {"messages": [U("Hello!")]},
     ["sys.default", "dev.default", "think.undefined", "gen.on", "tools.none", "vis.string"])
case("bare_array", [U("Hi")], ["sys.default", "dev.default", "think.undefined", "gen.on"])
case("mode_enabled", {"messages": [U("Prove it.")], "thinking_mode": "enabled"},
     ["think.enabled", "gen.on"])
case("mode_disabled", {"messages": [U("Quick answer.")], "thinking_mode": "disabled"},
     ["think.disabled", "gen.on"])
case("mode_adaptive", {"messages": [U("Maybe think.")], "thinking_mode": "adaptive"},
     ["think.adaptive", "gen.on"])
case("mode_enabled_no_gen", {"messages": [U("a"), A("b")], "thinking_mode": "enabled",
                             "add_generation_prompt": False}, ["think.enabled", "gen.off", "ai.plain"])
case("mode_disabled_no_gen", {"messages": [U("a")], "thinking_mode": "disabled",
                              "add_generation_prompt": False}, ["think.disabled", "gen.off"])
case("no_gen_undefined", {"messages": [U("a")], "add_generation_prompt": False},
     ["think.undefined", "gen.off"])
case("root_only", {"messages": [{"role": "root", "content": "You are M3, the root persona."},
                                U("Who are you?")]}, ["sys.root", "dev.default"])
case("root_empty", {"messages": [{"role": "root", "content": ""}, U("x")]},
     ["sys.root_empty", "dev.default"])
case("root_then_system", {"messages": [{"role": "root", "content": "Root rules."},
                                       {"role": "system", "content": "Be terse."}, U("Hi")],
                          "thinking_mode": "disabled"}, ["sys.root", "dev.after_root", "think.disabled"])
case("root_then_developer", {"messages": [{"role": "root", "content": "Root rules."},
                                          {"role": "developer", "content": "Answer in French."},
                                          U("Hello")]}, ["sys.root", "dev.after_root"])
case("system_first", {"messages": [{"role": "system", "content": "You are a pirate."}, U("Ahoy")]},
     ["dev.system", "sys.default"])
case("developer_first", {"messages": [{"role": "developer", "content": "Use JSON."}, U("Data?")]},
     ["dev.developer"])
case("system_empty_identity", {"messages": [{"role": "system", "content": ""}, U("q")],
                               "model_identity": "You are MiniMax-M3, a careful assistant."},
     ["dev.empty", "dev.model_identity"])
case("model_identity", {"messages": [U("q")], "model_identity": "You are a test identity."},
     ["dev.model_identity"])
case("system_list", {"messages": [{"role": "root", "content": [{"type": "text", "text": "Root "},
                                                                "part."]},
                                  {"role": "system", "content": [{"type": "text", "text": "Dev part."}]},
                                  U("ok")]}, ["sys.list", "sys.root", "dev.after_root", "vis.list_string"])
case("system_empty_list", {"messages": [{"role": "system", "content": []}, U("q")]},
     ["dev.empty"])
case("empty_messages", {"messages": []}, ["msgs.empty", "gen.on"])
case("empty_messages_no_gen", {"messages": [], "add_generation_prompt": False, "thinking_mode": "enabled"},
     ["msgs.empty", "gen.off", "think.enabled"])
case("multi_turn_reasoning", {"messages": [
    U("2+2?"), A("4", reasoning_content="Two plus two is four."), U("And 3+3?"),
    A("6", reasoning_content="Three plus three."), U("Thanks")], "thinking_mode": "enabled"},
    ["ai.reasoning", "think.enabled"])
case("reasoning_empty_string", {"messages": [U("q"), A("<mm:think>kept</mm:think>answer",
                                                       reasoning_content=""), U("next")]},
     ["ai.reasoning_empty"])
case("split_simple", {"messages": [U("q"), A("<mm:think>\nI reason.\n</mm:think>\n\nThe answer."),
                                   U("next")]}, ["ai.split"])
case("split_multi", {"messages": [U("q"), A("\n\npre<mm:think>a<mm:think>\nb\n</mm:think>mid</mm:think>\n"
                                            "end\n\n"), U("n")]}, ["ai.split", "ai.split_multi"])
case("split_empty", {"messages": [U("q"), A("<mm:think>\n\n</mm:think>just this"), U("n")],
                     "thinking_mode": "adaptive"}, ["ai.split_empty", "think.adaptive"])
case("split_no_open", {"messages": [U("q"), A("reasoning without opener</mm:think>reply"), U("n")]},
     ["ai.split"])
case("assistant_empty", {"messages": [U("q"), A(""), U("again")]}, ["ai.empty", "ai.plain"])
case("assistant_null_absent", {"messages": [U("q"), {"role": "assistant", "content": None}, U("n"),
                                            {"role": "assistant"}, {"role": "user"}]},
     ["vis.none", "vis.absent", "ai.empty"])
case("user_images", {"messages": [{"role": "user", "content": [
    {"type": "image", "image": "cat.png"}, {"type": "text", "text": "What is this?"},
    {"type": "image"}, "and this"]}], "thinking_mode": "enabled"},
    ["vis.image", "vis.list_text", "vis.list_string"])
case("user_video", {"messages": [{"role": "user", "content": [
    {"type": "text", "text": "Describe:"}, {"type": "video", "video": "clip.mp4"}]}]},
    ["vis.video", "vis.list_text"])
case("assistant_list_content", {"messages": [U("q"), {"role": "assistant", "content": [
    {"type": "text", "text": "<mm:think>r</mm:think>"}, {"type": "text", "text": "see "},
    {"type": "image"}]}, U("n")]}, ["ai.split", "vis.image", "vis.list_text"])
case("tools_weather_call", {"tools": [WEATHER], "messages": [
    U("Weather in Paris?"), A("", reasoning_content="I should call the tool.", tool_calls=[CALL_W]),
    T('{"temp": 18, "sky": "clear"}'), A("It is 18°C and clear in Paris.")], "thinking_mode": "enabled"},
    ["tools.some", "ai.calls_function", "tool.single", "ai.reasoning"])
case("tools_two_calls_merged", {"tools": [WEATHER, SEARCH], "messages": [
    {"role": "system", "content": "Use tools when useful."},
    U("Weather in Paris and news on M3?"),
    A("Calling both.", tool_calls=[CALL_W, CALL_S]),
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18C"},
    {"role": "tool", "content": "M3 released."}, U("Summarise.")]},
    ["tools.some", "ai.calls_many", "ai.calls_flat", "tool.merged", "dev.system"])
case("three_results_last", {"tools": [SEARCH], "messages": [
    U("s"), A("", tool_calls=[CALL_S, CALL_S, CALL_S]), T("r1"), T("r2"), T("r3")],
    "add_generation_prompt": True, "thinking_mode": "disabled"},
    ["tool.merged", "tool.last", "think.disabled"])
case("tool_parts", {"tools": [WEATHER], "messages": [
    U("look"), A("", tool_calls=[CALL_W]),
    {"role": "tool", "content": [{"type": "image"}, {"type": "video"}, {"output": "out text"},
                                 {"type": "text", "text": "plain text"}, "bare string"]},
    {"role": "tool"}, U("done?")]}, ["tool.parts", "tool.absent", "tool.merged"])
case("tool_after_user", {"tools": [SEARCH], "messages": [
    U("q"), A("", tool_calls=[CALL_S]), U("wait"), T("late result")]},
    ["tool.after_user", "tool.last"])
case("tools_empty_list", {"tools": [], "messages": [U("no tools")]}, ["tools.empty"])
case("tools_json_edge", {"tools": [EDGE, WEATHER], "messages": [U("edge")]},
     ["tools.some", "tools.json_edge"])
case("xml_arguments", {"tools": [EDGE], "messages": [U("x"), A("", tool_calls=[{"function": {
    "name": "edge_tool", "arguments": {
        "nested": {"a": 1, "b": {"c": [1, 2, {"d": "e"}]}, "skip": None},
        "list": [None, True, False, "s", 0.5, -0.0, 1e20, 1e-07, 3],
        "skipped": None, "flag": True, "off": False, "int": -0, "float": 2.0, "big": 12345678901234567890,
        "text": "<b>&amp; \"quotes\"</b>\nline", "empty_obj": {}, "empty_list": []}}}]),
    T("ok")]}, ["xml.nested", "xml.null_skip", "xml.scalars", "ai.calls_function"])
case("calls_empty_list", {"messages": [U("q"), A("plain", tool_calls=[]), U("n")]},
     ["ai.calls_empty"])
case("flat_last_call", {"tools": [SEARCH, WEATHER], "messages": [
    U("q"), A("", tool_calls=[CALL_W, {"name": "search", "arguments": {}}]), T("a"), T("b"),
    A("done"), U("more")], "thinking_mode": "enabled"}, ["ai.calls_flat", "tool.merged"])
case("long_agentic", {"tools": [WEATHER, SEARCH], "messages": [
    {"role": "root", "content": "Agent root."}, {"role": "developer", "content": "Plan first."},
    U("Plan a trip."), A("<mm:think>Need weather.</mm:think>", tool_calls=[CALL_W]),
    T("rain"), A("", reasoning_content="Search alternatives.", tool_calls=[CALL_S]), T("museums"),
    A("Visit the museums; it will rain."), U("Great, thanks!")], "thinking_mode": "adaptive"},
    ["sys.root", "dev.after_root", "ai.split", "tool.single", "think.adaptive"])
# the template raises
case("tool_without_call", {"messages": [U("q"), T("orphan")]}, ["tool.no_call"], "error",
     "message 1")
case("tool_after_plain_assistant", {"tools": [SEARCH], "messages": [
    U("q"), A("", tool_calls=[CALL_S]), T("r"), A("answer"), T("late")]}, ["tool.reset"], "error",
    "message 4")
case("tool_null_content", {"tools": [SEARCH], "messages": [
    U("q"), A("", tool_calls=[CALL_S]), {"role": "tool", "content": None}]}, ["tool.null"], "error",
    "messages[2].content")
# the template renders, m3 refuses
case("thinking_other", {"messages": [U("q")], "thinking_mode": "sometimes"}, ["think.other"],
     "reject", "thinking_mode")
case("system_later", {"messages": [U("q"), {"role": "system", "content": "late"}, U("n")]},
     ["role.dropped"], "reject", "message 1")
case("unknown_role", {"messages": [U("q"), {"role": "ai", "content": "old role name"}]},
     ["role.unknown"], "reject", "messages[1].role")
case("image_url_part", {"messages": [{"role": "user", "content": [
    {"type": "image_url", "image_url": {"url": "http://x/y.png"}}, {"type": "text", "text": "?"}]}]},
    ["vis.other_item"], "reject", "messages[0].content[0].type")
case("number_content", {"messages": [{"role": "user", "content": 42}]}, ["vis.other"], "reject",
     "messages[0].content")


def template_env(path):
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    text = open(path, encoding="utf-8", newline="").read()
    lf = text.replace("\r\n", "\n")
    sha = hashlib.sha256(lf.encode("utf-8")).hexdigest()
    if sha != TEMPLATE_SHA256_LF:
        sys.exit("chat_vectors: %s is not the published M3 template (sha256 of its LF text %s, "
                 "want %s; docs/tokenizer.md)" % (path, sha, TEMPLATE_SHA256_LF))

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(text)


def render(tpl, conv):
    """(text, None) or (None, error message) for one conversation file's value."""
    kw = {}
    if isinstance(conv, list):
        kw["messages"] = conv
    else:
        kw["messages"] = conv["messages"]
        for k in ("tools", "thinking_mode", "model_identity"):
            if k in conv:
                kw[k] = conv[k]
        kw["add_generation_prompt"] = conv.get("add_generation_prompt", True)
    if isinstance(conv, list):
        kw["add_generation_prompt"] = True
    try:
        return tpl.render(**kw), None
    except Exception as ex:  # jinja2.TemplateError, TypeError from iterating None, ...
        return None, "%s: %s" % (type(ex).__name__, ex)


def case_bytes(conv):
    return (json.dumps(conv, ensure_ascii=False, indent=1) + "\n").encode("utf-8")


def write_cases(out):
    os.makedirs(os.path.join(out, "cases"), exist_ok=True)
    for name, (conv, _, _, _) in CASES.items():
        with open(os.path.join(out, "cases", name + ".json"), "wb") as f:
            f.write(case_bytes(conv))
    covered = {b for _, _, bs, _ in CASES.values() for b in bs}
    missing = sorted(set(BRANCHES) - covered)
    if missing:
        sys.exit("chat_vectors: branches without a case: " + ", ".join(missing))
    man = {
        "suite": "m3-chat", "generator": "tools/chat_vectors.py",
        "template": {"sha256_lf": TEMPLATE_SHA256_LF, "chars_crlf": TEMPLATE_CHARS_CRLF,
                     "source": "docs/tokenizer.md (Chat template: provenance)"},
        "branches": BRANCHES,
        "cases": [{"name": n, "kind": k, "branches": bs, **({"field": f} if f else {})}
                  for n, (_, k, bs, f) in CASES.items()],
    }
    with open(os.path.join(out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(man, f, ensure_ascii=False, indent=1)
        f.write("\n")


def renderings(tpl, problems):
    """name -> expected bytes (text cases), checking each case's kind."""
    got = {}
    for name, (conv, kind, _, _) in CASES.items():
        # render what the file says, read back as a port would read it
        text, err = render(tpl, json.loads(case_bytes(conv)))
        if kind == "error" and err is None:
            problems.append("%s: the template was expected to fail but rendered" % name)
        if kind != "error" and err is not None:
            problems.append("%s: the template failed: %s" % (name, err))
        if kind == "text" and text is not None:
            got[name] = text.encode("utf-8")
    return got


def main():
    ap = argparse.ArgumentParser(description="M3 chat-template vectors")
    ap.add_argument("--out")
    ap.add_argument("--check", metavar="DIR")
    ap.add_argument("--template", default=os.environ.get("M3_CHAT_TEMPLATE") or None)
    a = ap.parse_args()
    problems = []
    if a.out:
        if not a.template:
            ap.error("--out needs --template FILE (the published M3 template)")
        tpl = template_env(a.template)
        write_cases(a.out)
        exp = os.path.join(a.out, "expected")
        shutil.rmtree(exp, ignore_errors=True)
        os.makedirs(exp)
        for name, data in renderings(tpl, problems).items():
            with open(os.path.join(exp, name + ".txt"), "wb") as f:
                f.write(data)
        for p in problems:
            print("chat_vectors: " + p)
        print("chat_vectors: %d cases written to %s" % (len(CASES), a.out))
        sys.exit(1 if problems else 0)
    if not a.check:
        ap.error("--out or --check required")
    tmp = tempfile.mkdtemp(prefix="m3chat-")
    try:
        write_cases(tmp)
        for rel in ["manifest.json"] + ["cases/%s.json" % n for n in CASES]:
            p = os.path.join(a.check, rel)
            if not os.path.exists(p) or open(p, "rb").read() != open(os.path.join(tmp, rel), "rb").read():
                problems.append("%s: bytes differ from tools/chat_vectors.py's" % rel)
    finally:
        shutil.rmtree(tmp)
    want = {n for n, (_, k, _, _) in CASES.items() if k == "text"}
    have = {f[:-4] for f in os.listdir(os.path.join(a.check, "expected")) if f.endswith(".txt")}
    for n in sorted(want ^ have):
        problems.append("expected/%s.txt: %s" % (n, "missing" if n in want else "not a case"))
    rerendered = "not re-rendered: no template given (--template FILE or M3_CHAT_TEMPLATE; " \
                 "docs/tokenizer.md)"
    if a.template:
        got = renderings(template_env(a.template), problems)
        for n, data in got.items():
            p = os.path.join(a.check, "expected", n + ".txt")
            if not os.path.exists(p) or open(p, "rb").read() != data:
                problems.append("expected/%s.txt: differs from the template's rendering" % n)
        rerendered = "%d renderings re-rendered with jinja2 and compared" % len(got)
    for p in problems:
        print("chat-vectors-check: " + p)
    print("chat-vectors-check: %d cases, %d branches; %s; %s" % (
        len(CASES), len(BRANCHES), rerendered, "FAILED" if problems else "identical"))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
