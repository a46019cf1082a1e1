"""The Chinese of chapter 06's check messages (minimodel/grading/ch06/)."""

MESSAGES: dict[str, str] = {
    # common.py
    "{what} should return {listed}, got {got}": "{what} 应当返回 {listed}，实际是 {got}",
    "{what} should return a list of Python ints, got items of type {kinds}{tip}":
        "{what} 应当返回由 Python int 组成的列表，实际含有 {kinds} 类型的元素{tip}",
    # generate.py
    "forward_all was called with a {kind}; it takes a LongTensor of ids [1, T]":
        "调用 forward_all 时传入的是 {kind}；它接受的是由 ID 组成的 LongTensor [1, T]",
    "forward_all was called with shape {shape}; it takes ids [1, T] (one sequence: keep the batch "
    "dimension)":
        "调用 forward_all 时传入的形状是 {shape}；它接受的是 ID [1, T]（一个序列：要保留批维度）",
    "forward_all was called with {dtype} ids; token ids are torch.long":
        "调用 forward_all 时传入的 ID 是 {dtype}；token ID 应为 torch.long",
    "generate(prompt of {T} tokens, max_new_tokens={n}, eos_id={eos_id})":
        "generate(长 {T} 个 token 的提示词, max_new_tokens={n}, eos_id={eos_id})",
    " (use int(token))": "（请用 int(token) 转换）",
    "a list of ints": "int 列表",
    "returns max_new_tokens new token ids (a list of ints) without EOS":
        "没有 EOS 时返回 max_new_tokens 个新 token ID（int 列表）",
    "generate returned the prompt too; return only the new tokens":
        "generate 把提示词也返回了；只应当返回新生成的 token",
    "with max_new_tokens={n} and no EOS, generate should return {n} tokens, got {got}":
        "max_new_tokens={n} 且没有 EOS 时，generate 应当返回 {n} 个 token，实际返回了 {got} 个",
    "each new token is the argmax of the last position's logits":
        "每个新 token 都是最后一个位置的 logits 的 argmax",
    "with a prompt of {T} tokens (V={V}), the greedy tokens are {want}, got {got} (first "
    "difference at new token {k}): the next token is the argmax, over the vocabulary, of the "
    "logits at the last position (the only position that has read the whole sequence)":
        "提示词长 {T} 个 token（V={V}）时，贪心解码的 token 应为 {want}，实际是 {got}（第一处不同在"
        "新 token {k}）：下一个 token 是最后一个位置的 logits 在词表上的 argmax（只有这个位置读过"
        "整个序列）",
    "every call shows the model the whole sequence so far":
        "每次调用都把迄今为止的整个序列交给模型",
    "call {i} of the model got {n} token(s) {seen}; it should get the prompt and the {i} token(s) "
    "generated so far ({want} tokens): without a cache the model needs the whole sequence every "
    "step":
        "第 {i} 次模型调用收到了 {n} 个 token {seen}；它应收到提示词加上迄今生成的 {i} 个 token"
        "（共 {want} 个）：没有缓存时，模型每一步都需要整个序列",
    "calls the model once per new token, never more": "每个新 token 只调用一次模型，绝不多调",
    "generate made {calls} model calls for {n} new tokens (max_new_tokens={limit}); one call per "
    "token: no extra call after the last one":
        "generate 为 {n} 个新 token 调用了 {calls} 次模型（max_new_tokens={limit}）；每个 token "
        "调用一次：最后一个 token 之后不要再多调用",
    "max_new_tokens=0 returns [] and never calls the model":
        "max_new_tokens=0 时返回 []，且不调用模型",
    "generate(max_new_tokens=0) called the model {n} time(s); with nothing to generate it should "
    "not run the model at all":
        "generate(max_new_tokens=0) 调用了 {n} 次模型；没有要生成的东西，就根本不该运行模型",
    "generate(max_new_tokens=0) should return [], got {got}":
        "generate(max_new_tokens=0) 应当返回 []，实际是 {got}",
    "stops right after EOS, and EOS is part of the output":
        "遇到 EOS 立即停止，且 EOS 包含在输出中",
    "generate stopped at EOS but left it out: expected {want} ending with EOS {eos}, got {got}; "
    "EOS is a generated token and belongs to the output":
        "generate 在 EOS 处停下了，却没把它放进结果：应为以 EOS {eos} 结尾的 {want}，实际是 {got}；"
        "EOS 是生成出来的 token，属于输出的一部分",
    "with eos_id={eos}, generate should return {want} (stop right after EOS, EOS included), got "
    "{got}":
        "eos_id={eos} 时，generate 应当返回 {want}（遇到 EOS 立即停止，包含 EOS），实际是 {got}",
    "generate called the model {calls} times for {n} tokens ending with EOS; after EOS there is "
    "nothing more to compute":
        "对以 EOS 结尾的 {n} 个 token，generate 调用了 {calls} 次模型；EOS 之后就没有什么要"
        "计算的了",
    "eos_id=0 is a token like any other; EOS in the prompt is not a stop":
        "eos_id=0 与其他 token 一样；提示词中的 EOS 不会引起停止",
    "with eos_id=0 and the model's first token 0, generate should return [0], got {got}: 0 is a "
    "real token id, even though Python treats it as false":
        "eos_id=0 且模型生成的第一个 token 是 0 时，generate 应当返回 [0]，实际是 {got}：0 是一个"
        "真实的 token ID，尽管 Python 把它当作假值",
    "the prompt holds EOS ({eos}) at position 1; only a generated EOS stops the loop, so generate "
    "should return {want}, got {got}":
        "提示词的位置 1 上是 EOS（{eos}）；只有生成出来的 EOS 才会终止循环，所以 generate 应当返回 "
        "{want}，实际是 {got}",
    # reference.py
    "too few prompts with a clear greedy path": "贪心路径清晰的提示词太少",
    # stream.py
    "stream_text(tokenizer, {n} ids)": "对 {n} 个 ID 调用的 stream_text(tokenizer, ids)",
    "{what} should return a list of str, got {got}": "{what} 应当返回 str 列表，实际是 {got}",
    "{what} should return a list of str, got items of type {kinds}":
        "{what} 应当返回 str 列表，实际含有 {kinds} 类型的元素",
    "returns one text delta (a str) per token": "每个 token 返回一个文本增量（str）",
    "for {n} tokens ({text!r}...) stream_text returned {got} deltas; there is one per token (\"\" "
    "while a character is pending)":
        "对 {n} 个 token（{text!r}...），stream_text 返回了 {got} 个增量；应每个 token 一个（字符"
        "尚未完整时为 \"\"）",
    "{n} texts: Chinese, emoji, rare characters, mixed":
        "{n} 段文本：中文、emoji、生僻字符、混合文本",
    "the deltas join up to exactly tokenizer.decode(ids)":
        "所有增量拼起来恰好等于 tokenizer.decode(ids)",
    ": the text ends inside a character, and those last bytes never came out; after the last "
    "token, emit whatever is still held back":
        "：文本在一个字符中间结束，而最后这些字节始终没有放出；最后一个 token 之后，要把仍然扣住的"
        "内容全部放出",
    ": a broken character leaked into a delta": "：有拆坏的字符漏进了增量",
    "the deltas joined give {got!r} (last 30 chars) but tokenizer.decode(ids) is {want!r}{hint}":
        "增量拼起来是 {got!r}（最后 30 个字符），但 tokenizer.decode(ids) 是 {want!r}{hint}",
    "no delta holds a broken character (U+FFFD)": "没有任何增量含有拆坏的字符（U+FFFD）",
    "delta {i} is {d!r}: token {token} ends in the middle of a character, and decoding it then "
    "gives U+FFFD. Hold those bytes back (emit \"\") until the following token completes the "
    "character":
        "第 {i} 个增量是 {d!r}：token {token} 在一个字符中间结束，此时解码会得到 U+FFFD。要把这些"
        "字节扣住（放出 \"\"），直到后面的 token 把这个字符补全",
    "emits text as soon as the tokens so far form whole characters":
        "迄今为止的 token 一构成完整的字符，就立即放出文本",
    "after token {i} the text so far is {so_far!r} (last 20 chars, all whole characters) but the "
    "deltas so far give {got!r}: a streaming user should see text as soon as it is complete, not "
    "at the end":
        "第 {i} 个 token 之后，迄今为止的文本是 {so_far!r}（最后 20 个字符，都是完整字符），但迄今"
        "为止的增量拼起来是 {got!r}：流式输出时，用户应在文本一完整时就看到它，而不是等到最后",
    # visible.py
    "{what} should return a tuple (text, stopped), got {got!r}":
        "{what} 应当返回元组 (text, stopped)，实际是 {got!r}",
    "{what} should return (str, bool), got ({text}, {flag})":
        "{what} 应当返回 (str, bool)，实际是 ({text}, {flag})",
    ": the stop string itself is not part of the output": "：停止字符串本身不属于输出",
    ": a stop string is in the text (maybe not at its very end: one token can carry a stop "
    "string and more), so the text stops there":
        "：文本中出现了停止字符串（不一定在最末尾：一个 token 可能既包含停止字符串，又包含更多"
        "内容），所以文本在那里结束",
    ": keep the text before the stop string as it is (no stripping of spaces)":
        "：停止字符串之前的文本要原样保留（不要去掉空白）",
    ": cut at the stop string that starts first in the text, whatever its place in the list, and "
    "at its first occurrence":
        "：要截断在文本中起始位置最靠前的那个停止字符串处（无论它在列表中排第几），并按它第一次出现"
        "的位置算",
    ": with final=True no more text will come, so nothing can complete a stop string: show "
    "everything":
        "：final=True 时不会再有文本到来，没有什么能补全停止字符串：全部显示",
    ": the end {end!r} could be the start of a stop string, so a stream must not show it yet":
        "：末尾的 {end!r} 可能是某个停止字符串的开头，所以流式输出还不能显示它",
    ": it held back {held!r}, but only {end!r} could still become a stop string; text that cannot "
    "start one should reach the reader now":
        "：它扣住了 {held!r}，但只有 {end!r} 还可能变成停止字符串；不可能是停止字符串开头的文本应"
        "立即交给读者",
    ": it showed {shown!r}, which could be the start of a stop string; hold back the longest end "
    "of the text that begins a stop string":
        "：它显示了 {shown!r}，而这可能是某个停止字符串的开头；要扣住文本末尾能作为停止字符串开头的"
        "最长一段",
    "visible_text({text!r}, {stop!r}, final={final}) should return {want!r}, got {got!r}{hint}":
        "visible_text({text!r}, {stop!r}, final={final}) 应当返回 {want!r}，实际是 {got!r}{hint}",
    "no stop string can start in the text: all of it is shown":
        "文本中不可能有停止字符串的开头：全部显示",
    "cuts just before the stop string that starts first": "恰好截断在最先出现的停止字符串之前",
    "{n} texts": "{n} 段文本",
    "holds back only the longest end that could start a stop string":
        "只扣住可能是停止字符串开头的最长末尾",
    "final=True: the stream has ended, so nothing is held back":
        "final=True：流已经结束，什么都不扣住",
    "over a stream, shown text is never taken back": "在整个流中，已显示的文本绝不收回",
    "streaming {text!r} with stop {stop!r}: the reader had seen {shown!r}, then "
    "visible_text({part!r}) gave {now!r}, which takes some of it back; text that might start a "
    "stop string must not be shown early":
        "以停止字符串 {stop!r} 流式输出 {text!r} 时：读者已经看到了 {shown!r}，随后 "
        "visible_text({part!r}) 给出 {now!r}，收回了其中一部分；可能是停止字符串开头的文本不能提前"
        "显示",
    "{n} streams": "{n} 个流",
    # writer.py
    "a list of ints (the new token ids)": "int 列表（新生成的 token ID）",
    "greedy: token for token what mm.LLM(...).generate writes on bard":
        "贪心解码：在 bard 上与 mm.LLM(...).generate 写出的 token 逐个一致",
    "for {prompt!r} with max_new_tokens={n}, my_writer returned {short} tokens, one short of the "
    "engine's {n}: the last new token is missing from the result":
        "对 {prompt!r}，max_new_tokens={n} 时 my_writer 返回了 {short} 个 token，比引擎的 {n} 个"
        "少一个：结果中缺了最后一个新 token",
    "for {prompt!r} with max_new_tokens={n} and no EOS, my_writer returned {got} tokens instead "
    "of {n}":
        "对 {prompt!r}，max_new_tokens={n} 且没有 EOS 时，my_writer 返回了 {got} 个 token，而不是 "
        "{n} 个",
    "for {prompt!r} the engine writes {want!r}, your code {got!r} (first different token: new "
    "token {k}, {got_k} instead of {want_k}). The loop's own check passes on fake models, so look "
    "at the model: does my_qwen3_forward of chapter 04 pass its check, is it given the whole "
    "sequence, and is the greedy path (temperature 0) the plain argmax?":
        "对 {prompt!r}，引擎写出 {want!r}，你的代码写出 {got!r}（第一个不同的 token：新 token {k}，"
        "是 {got_k} 而不是 {want_k}）。循环自己的检查在假模型上能通过，所以要看看模型：第 04 章的 "
        "my_qwen3_forward 能通过它的检查吗？交给它的是整个序列吗？贪心路径（温度 0）是不是直接取 "
        "argmax？",
    "{n} prompts of bard, {low} to {high} new tokens each":
        "bard 上的 {n} 个提示词，每个生成 {low} 到 {high} 个新 token",
    "stops right after EOS, and EOS is part of the result":
        "遇到 EOS 立即停止，且 EOS 包含在结果中",
    "with eos_id={eos} my_writer stopped before the EOS token: it is a generated token and belongs "
    "to the result":
        "eos_id={eos} 时，my_writer 在 EOS token 之前就停了：EOS 是生成出来的 token，属于结果的"
        "一部分",
    ": it went on after EOS (does eos_id reach your generate?)":
        "：它在 EOS 之后还在继续生成（eos_id 传到你的 generate 了吗？）",
    "with eos_id={eos}, which the model writes as new token {j}, my_writer should return {want}, "
    "got {got}{hint}":
        "eos_id={eos}（模型把它写作新 token {j}）时，my_writer 应当返回 {want}，实际是 {got}{hint}",
    "runs your generate and your my_qwen3_forward, once per token":
        "运行你的 generate 和你的 my_qwen3_forward，每个 token 一次",
    "my_writer never called generate, the loop you wrote in this notebook: the capstone is your "
    "own loop driving your own model":
        "my_writer 从未调用 generate，也就是你在本 notebook 中写的循环：综合练习是用你自己的循环"
        "驱动你自己的模型",
    "my_writer made {calls} call(s) of my_qwen3_forward (from your chapter 04 notebook) for {n} "
    "new tokens: the logits must come from your model, run on the whole sequence at every step, "
    "not from the package's":
        "my_writer 为 {n} 个新 token 调用了 {calls} 次 my_qwen3_forward（来自你第 04 章的 "
        "notebook）：logits 必须来自你的模型，并且每一步都在整个序列上运行，而不是来自包里的模型",
    "sampling: your generate keeps the tokens your sample draws, from the top-k, seeded":
        "采样：你的 generate 保留你的 sample 抽出的 token，它们来自 top-k，并由种子决定",
    "sampling with max_new_tokens={n} and no EOS should give {n} tokens, got {got}":
        "采样时 max_new_tokens={n} 且没有 EOS，应得到 {n} 个 token，实际是 {got} 个",
    "my_writer made {calls} call(s) of sample (from your chapter 05 notebook) for {n} sampled "
    "tokens: with temperature > 0 each token is drawn by your sampler":
        "my_writer 为 {n} 个采样的 token 调用了 {calls} 次 sample（来自你第 05 章的 notebook）："
        "temperature > 0 时，每个 token 都由你的采样器抽取",
    "with temperature > 0 my_writer never called generate: sampled text, too, comes out of the "
    "loop you wrote in exercise 1, not out of a second loop":
        "temperature > 0 时，my_writer 从未调用 generate：采样得到的文本同样要出自你在练习 1 中写的"
        "循环，而不是另一个循环",
    "with temperature={t}, new token {i} of my_writer is {token} ({text!r}), which is not the "
    "token your sample drew for that step: the token the loop keeps must be the one sample "
    "returned":
        "temperature={t} 时，my_writer 的新 token {i} 是 {token}（{text!r}），不是你的 sample 在"
        "这一步抽出的 token：循环保留的 token 必须是 sample 返回的那个",
    "with top_k={k}, new token {i} ({text!r}) is not among the model's {k} most likely tokens at "
    "that step: hand temperature, top_k and top_p to your sample":
        "top_k={k} 时，新 token {i}（{text!r}）不在模型这一步最可能的 {k} 个 token 之中：要把 "
        "temperature、top_k 和 top_p 交给你的 sample",
    "two runs with generators seeded alike gave different tokens: hand the generator to your "
    "sample":
        "用种子相同的生成器运行两次，得到的 token 却不同：要把生成器交给你的 sample",
    "with temperature={t} and top_k={k} every token of two seeded runs was the greedy one: the "
    "sampling settings do not reach the draw":
        "temperature={t}、top_k={k} 时，两次带种子的运行中每个 token 都与贪心解码相同：采样设置没有"
        "传到抽样这一步",
    "2 seeds x {n} tokens at temperature {t}, top-k {k}":
        "2 个种子 × 每个 {n} 个 token，温度 {t}，top-k {k}",
}
