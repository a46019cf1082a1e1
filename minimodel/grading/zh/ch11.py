"""The Chinese of chapter 11's check messages (minimodel/grading/ch11/)."""

MESSAGES: dict[str, str] = {
    # server.py: the real server
    "the server answered {status}": "服务器的响应状态码是 {status}",
    "the server answered {status}: {text}": "服务器的响应状态码是 {status}：{text}",
    # sse.py: ch11.sse_events
    "your parser read on after `data: [DONE]`: the stream is over there, and a real connection "
    "would have nothing more to give":
        "你的解析器在 `data: [DONE]` 之后还在继续读取：流到那里就结束了，真实的连接不会再给出"
        "任何数据",
    "sse_events returned {got!r}; yield the events (a generator)":
        "sse_events 返回了 {got!r}；应逐个 yield 事件（写成生成器）",
    "{what}: sse_events yielded {event!r}; yield each event's JSON as a dict (json.loads of its "
    "data)":
        "{what}：sse_events yield 出了 {event!r}；应把每个事件的 JSON 作为 dict yield 出来（对它"
        "的数据做 json.loads）",
    " (the events after the first missing one never came)":
        "（从第一个缺失的事件起，后面的事件都没有出来）",
    "{what}: {n} events, expected {want}{hint}": "{what}：得到 {n} 个事件，应为 {want} 个{hint}",
    "{what}: event {k} is {got}, expected {want}": "{what}：事件 {k} 是 {got}，应为 {want}",
    "the check's own stream is wrong": "检查自己生成的流有误",
    "one byte per chunk": "每个数据块一个字节",
    "cut into chunks at random": "随机切成数据块",
    "one event per chunk": "每个数据块一个事件",
    "a stream of {n} events {cut}": "一个含 {n} 个事件的流（{cut}）",
    "one event per chunk: every JSON event, in order, up to `data: [DONE]`":
        "每个数据块一个事件：按顺序给出每个 JSON 事件，直到 `data: [DONE]`",
    "events cut anywhere: one byte per chunk, and chunks of random sizes that split lines and "
    "UTF-8 characters":
        "事件在任意位置被切开：每个数据块一个字节，以及大小随机、会切断行和 UTF-8 字符的数据块",
    "comments, other fields, extra blank lines, `data:` without its space, CRLF line ends and "
    "one JSON over several data lines":
        "注释、其他字段、多余的空行、不带空格的 `data:`、CRLF 行尾，以及分成几行 data 发来的"
        "一个 JSON",
    "a stream with two data lines and CRLF": "一个含两行 data 和 CRLF 的流",
    "a stream with one event over three data lines and CRLF":
        "一个事件分成三行 data、带 CRLF 的流",
    "yields each event as soon as its blank line has come, reads nothing after `data: [DONE]`, "
    "and just ends if the stream ends without it":
        "每个事件的空行一到就立即 yield，`data: [DONE]` 之后什么都不再读；流中没有它就结束时，"
        "直接结束",
    "event {k} of a stream is {event!r}, expected {want!r}":
        "流中的事件 {k} 是 {event!r}，应为 {want!r}",
    "sse_events read {read} chunks before it yielded event {k}, which was complete after chunk "
    "{after}: yield each event at its blank line, so that the client sees the text while the "
    "rest is generated":
        "sse_events 读了 {read} 个数据块才 yield 出事件 {k}，而它在第 {after} 个数据块之后就已"
        "完整：应在每个事件的空行处立即 yield，这样客户端才能在其余部分仍在生成时看到文本",
    "after `data: [DONE]` sse_events yielded more events":
        "在 `data: [DONE]` 之后，sse_events 还 yield 出了更多事件",
    "a stream cut off before [DONE]": "一个在 [DONE] 之前被切断的流",
    "a stream that ends without `data: [DONE]` (the connection dropped; its last, unfinished "
    "event is no event)":
        "一个没有 `data: [DONE]` 就结束的流（连接断了；最后那个没有完成的事件不算事件）",
    "the real server's bytes (completions and chat, several choices, usage) in httpx's chunks "
    "and cut again at random":
        "真实服务器的字节（completions 和 chat、多个结果、用量），按 httpx 给出的数据块，以及"
        "再随机切分",
    "in httpx's chunks": "按 httpx 给出的数据块",
    "cut at random": "随机切分",
    "the stream of {path} {how}": "{path} 的流（{how}）",
    "{count} events of the real server": "真实服务器的 {count} 个事件",
    # merge.py: ch11.merge_stream
    "returned {got}; return a dict shaped as the non-streamed answer":
        "返回了 {got}；应返回一个与非流式答案结构相同的 dict",
    "{key} is {got!r}, expected {want!r}": "{key} 是 {got!r}，应为 {want!r}",
    "usage is 'missing', expected {want!r}": "没有 usage，应为 {want!r}",
    "usage is {got!r}, expected 'no usage key (the stream carried none)'":
        "usage 是 {got!r}，但不应有 usage 这个键（流中没有携带用量）",
    "usage is {got!r}, expected {want!r}": "usage 是 {got!r}，应为 {want!r}",
    "choices holds {n!r}, expected {want} choices, one per index, in index order":
        "choices 中的结果数为 {n!r}，应为 {want} 个结果，每个 index 一个，按 index 顺序排列",
    "choice {index} is {got}, expected {want}": "结果 {index} 是 {got}，应为 {want}",
    "it has keys {keys} the non-streamed answer does not have":
        "它有非流式答案中没有的键 {keys}",
    "merge_stream changed the events of {what}; leave them as they are":
        "merge_stream 修改了{what}中的事件；请保持它们原样",
    "merge_stream of {what}: {diff}": "对{what}做 merge_stream：{diff}",
    "completions, one choice: its texts joined, the finish_reason of its last chunk, id, "
    "created, model and object text_completion":
        "completions，一个结果：各段文本拼接起来，取最后一个数据块的 finish_reason，还有 id、"
        "created、model，以及 object 为 text_completion",
    "a completions stream of {n} events": "一个含 {n} 个事件的 completions 流",
    "several choices interleaved in any order; chat: the role of the first delta, the content "
    "joined, object chat.completion":
        "多个结果以任意顺序交错出现；chat：取第一个 delta 的 role，content 拼接起来，object 为 "
        "chat.completion",
    "a {kind} stream of {n} interleaved choices": "一个含 {n} 个交错结果的 {kind} 流",
    "usage from the stream's last chunk (no usage key when it has none); an error event raises "
    "RuntimeError with its message":
        "usage 取自流的最后一个数据块（流中没有时就不要 usage 这个键）；遇到错误事件时，用它的 "
        "message 抛出 RuntimeError",
    "a stream with a usage chunk": "一个带 usage 数据块的流",
    "merge_stream raised RuntimeError({got!r}); give it the error's message, {message!r}":
        "merge_stream 抛出了 RuntimeError({got!r})；应把错误的 message {message!r} 传给它",
    "a stream that ends with an error event (a failed step) merged into an answer; raise "
    "RuntimeError with the error's message instead":
        "一个以错误事件结束的流（某一步失败了）被合并成了答案；应改为用错误的 message 抛出 "
        "RuntimeError",
    "the real server: streams of completions and chat with n = 3, seeds and stop strings merge "
    "to the non-streamed answer":
        "真实服务器：n = 3、带随机种子和停止字符串的 completions 流和 chat 流，合并后等于非流式"
        "的答案",
    "merge_stream of the server's stream of {path} returned {got}":
        "对服务器 {path} 的流做 merge_stream，返回了 {got}",
    "the stream of {path} ({body}) merged to {got}; without streaming the server answers "
    "{whole}":
        "{path} 的流（{body}）合并成了 {got}；而不用流式时，服务器的回答是 {whole}",
    "{n} streams merged, {stops} of their choices cut at a stop string":
        "合并了 {n} 个流，其中 {stops} 个结果在停止字符串处截断",
    # timed.py: ch11.timed_stream
    "timed_stream returned {got!r}; return a dict with text, completion_tokens, ttft_s and "
    "tpot_s":
        "timed_stream 返回了 {got!r}；应返回一个含 text、completion_tokens、ttft_s 和 tpot_s 的 "
        "dict",
    "timed_stream's answer has no {missing}": "timed_stream 的返回值中没有 {missing}",
    "a {kind} stream of {n} events arriving {arrivals}{more} s after start, {tokens} tokens":
        "一个 {kind} 流（{n} 个事件在 start 之后 {arrivals}{more} 秒到达，共 {tokens} 个 "
        "token）",
    " The first event of a chat stream only says the role: the first text comes later.":
        "chat 流的第一个事件只给出角色：第一段文本在后面才来。",
    "{what}: {key} = {got!r}, expected {want!r}.{hint}":
        "{what}：{key} = {got!r}，应为 {want!r}。{hint}",
    "TTFT: from `start` to the first event that carries text (not the chat role event, not an "
    "empty chunk)":
        "TTFT：从 `start` 到第一个带有文本的事件（不是 chat 的角色事件，也不是空的数据块）",
    "TPOT: (last text - first text) / (completion_tokens - 1), the tokens from the usage chunk; "
    "0.0 for one token":
        "TPOT：(last text - first text) / (completion_tokens - 1)，token 数取自 usage 数据块；"
        "只有一个 token 时为 0.0",
    "the text joined; a stream without a usage chunk is a ValueError":
        "文本拼接起来；没有 usage 数据块的流要抛出 ValueError",
    "a stream without a usage chunk gave an answer: without usage the client cannot know how "
    "many tokens came (a chunk may hold several, or none); raise ValueError saying to ask for "
    "stream_options.include_usage":
        "一个没有 usage 数据块的流却得到了答案：没有用量，客户端就无法知道来了多少个 token（一个"
        "数据块可能含有好几个，也可能一个都没有）；应抛出 ValueError，提示要请求 "
        "stream_options.include_usage",
    "the real server: the text and tokens of the answer without streaming, and TTFT and TPOT "
    "read from the clock at the events":
        "真实服务器：文本和 token 数与非流式的回答一致，TTFT 和 TPOT 取自事件到达时的时钟读数",
    "timed_stream returned {got!r}": "timed_stream 返回了 {got!r}",
    "timed_stream's text is {got!r}; without streaming the server answers {want!r}":
        "timed_stream 的文本是 {got!r}；而不用流式时，服务器的回答是 {want!r}",
    "completion_tokens = {got!r}, the server generated {want}":
        "completion_tokens = {got!r}，而服务器生成了 {want} 个",
    "ttft_s and tpot_s should be numbers of seconds, got {ttft!r} and {tpot!r}":
        "ttft_s 和 tpot_s 应是以秒为单位的数，实际是 {ttft!r} 和 {tpot!r}",
    "ttft_s is not the time between `start` and a reading of `clock`: read the time with the "
    "clock you are given, when an event arrives":
        "ttft_s 不是从 `start` 到某次 `clock` 读数之间的时间：应在事件到达时，用传给你的时钟读取"
        "时间",
    "tpot_s * (completion_tokens - 1) does not lead from the first text to a reading of "
    "`clock`: measure from the first text to the last":
        "从第一段文本的时刻加上 tpot_s * (completion_tokens - 1)，并不落在任何一次 `clock` 读数"
        "上：应从第一段文本量到最后一段",
    "{n} tokens streamed and timed": "{n} 个 token 已流式接收并计时",
    # sweep.py: ch11.sweep
    "sweep returned {got}; return a list of dicts, one row per level":
        "sweep 返回了 {got}；应返回一个由 dict 组成的 list，每个级别一行",
    "sweep returned {n} rows for {levels} levels": "sweep 为 {levels} 个级别返回了 {n} 行",
    "a row has no {missing}; each row has {keys}": "有一行缺少 {missing}；每一行都要有 {keys}",
    "the rows are for concurrency {got}; expected {levels}, in order":
        "各行的并发度是 {got}；应为 {levels}，并按这个顺序",
    "run_one was called {total} times; a sweep of {L} levels over {P} prompts makes {calls} "
    "calls: one warm-up, then every prompt once at every level":
        "run_one 被调用了 {total} 次；对 {P} 个提示词做 {L} 个级别的扫描，应调用 {calls} 次："
        "一次预热，然后每个提示词在每个级别各发送一次",
    "one row per level; each level sends every prompt once: the same requests and tokens at "
    "every level":
        "每个级别一行；每个级别把每个提示词各发送一次：每个级别的请求和 token 都相同",
    "at concurrency {n} the sweep sent {different} different prompts ({sent} requests); send "
    "each of the {prompts} prompts once at every level, so that the levels compare the same "
    "work":
        "并发度为 {n} 时，扫描发送了 {different} 个不同的提示词（{sent} 个请求）；应在每个级别把 "
        "{prompts} 个提示词各发送一次，这样各级别比较的才是同样的工作",
    "the row of concurrency {n} says {requests} requests and {tokens} tokens; its requests were "
    "{calls}, their completion_tokens add up to {want}":
        "并发度 {n} 的那一行写的是 {requests} 个请求、{tokens} 个 token；它的请求实际有 {calls} "
        "个，其 completion_tokens 之和为 {want}",
    "{levels} levels of {n} requests, {tokens} tokens each":
        "{levels} 个级别，每个级别 {n} 个请求、{tokens} 个 token",
    "a warm-up request runs alone before the first level, and is counted in no row and in no "
    "wall_s":
        "在第一个级别之前单独运行一个预热请求，它不计入任何一行，也不计入任何 wall_s",
    "the first request ran together with others: warm up with one request alone, before the "
    "first level starts":
        "第一个请求是和其他请求一起运行的：应在第一个级别开始之前，单独用一个请求预热",
    "the row of concurrency {n} has a TTFT p90 of 30 s or more: the warm-up's cold start is "
    "counted; leave it out":
        "并发度 {n} 那一行的 TTFT p90 达到 30 秒或更多：预热的冷启动被算进去了；应把它剔除",
    "no clock reading lies between the end of the warm-up and the first request of the first "
    "level: start the level's clock after the warm-up":
        "在预热结束与第一个级别的第一个请求之间没有任何时钟读数：应在预热之后再开始为该级别计时",
    "level n has n requests in flight at once, started together, never more; one level after "
    "another":
        "级别 n 同时有 n 个请求在进行中，它们一起启动，绝不会更多；各级别依次运行",
    "at concurrency {n}, {peak} requests were in flight at once":
        "并发度为 {n} 时，同时有 {peak} 个请求在进行中",
    "at concurrency {n}, {threads} threads sent requests: {n} clients":
        "并发度为 {n} 时，有 {threads} 个线程发送了请求：应为 {n} 个客户端",
    "at concurrency {n} at most {peak} requests were in flight at once (the first ones waited "
    "{wait:g} s for the others): start {n} clients together, each taking the next prompt when "
    "its request is done":
        "并发度为 {n} 时，同时进行中的请求最多只有 {peak} 个（最先发出的请求等了其他请求 "
        "{wait:g} 秒）：应同时启动 {n} 个客户端，每个客户端在自己的请求完成后取下一个提示词",
    "requests of concurrency {next} started while those of concurrency {n} were still in "
    "flight: run the levels one after another":
        "并发度 {n} 的请求还在进行中，并发度 {next} 的请求就开始了：各级别应依次运行",
    "p50 and p90 (nearest rank) of the level's own TTFTs and TPOTs; throughput = tokens / "
    "wall_s, with wall_s read from `clock` around the level":
        "该级别自己的 TTFT 和 TPOT 的 p50 与 p90（最近秩法）；throughput = tokens / wall_s，"
        "wall_s 由该级别前后的 `clock` 读数得出",
    "concurrency {n}: {key}_p{p} = {got!r}, expected {want!r}, the nearest-rank p{p} of the {k} "
    "{name}s of this level: sorted(values)[ceil({frac:g} * {k}) - 1]":
        "并发度 {n}：{key}_p{p} = {got!r}，应为 {want!r}，即该级别 {k} 个 {name} 按最近秩法取的 "
        "p{p}：sorted(values)[ceil({frac:g} * {k}) - 1]",
    "concurrency {n}: wall_s = {wall!r} is not the time between a reading of `clock` before the "
    "level's first request and one after its last: time the whole level, and only it, with the "
    "clock you are given":
        "并发度 {n}：wall_s = {wall!r} 不是从该级别第一个请求之前的某次 `clock` 读数到最后一个"
        "请求之后的某次读数之间的时间：应用传给你的时钟为整个级别计时，并且只计这个级别",
    "concurrency {n}: throughput = {got!r}; it is tokens / wall_s = {want!r} (tokens per "
    "second, all clients together)":
        "并发度 {n}：throughput = {got!r}；它应是 tokens / wall_s = {want!r}（所有客户端合计"
        "每秒的 token 数）",
    "the real server: levels 1, 2 and 4 over 4 prompts, the same tokens at every level":
        "真实服务器：对 4 个提示词运行级别 1、2 和 4，每个级别的 token 数相同",
    "run_one was called {n} times": "run_one 被调用了 {n} 次",
    "the row of concurrency {n} says {requests} requests, {tokens} tokens; each level sent "
    "{sent} requests of 6 tokens":
        "并发度 {n} 的那一行写的是 {requests} 个请求、{tokens} 个 token；每个级别发送的是 {sent} "
        "个各 6 个 token 的请求",
    "the row of concurrency {n} holds {row}": "并发度 {n} 的那一行是 {row}",
    "{levels} levels of {n} requests on the real server":
        "在真实服务器上运行了 {levels} 个级别，每个级别 {n} 个请求",
}
