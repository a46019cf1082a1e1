"""The Chinese of chapter 13's check messages (minimodel/grading/ch13/)."""

MESSAGES: dict[str, str] = {
    # common.py
    "{what}: over {n} draws the frequencies are not the target's distribution (chi-square "
    "p-value {pvalue:.1e}, below the false-alarm rate {rate:g}); e.g. token {token} came out "
    "{got:.3f} of the time, its target probability is {want:.3f}. {hint}":
        "{what}：{n} 次抽样得到的频率不服从目标模型的分布（卡方检验的 p 值为 {pvalue:.1e}，"
        "低于误报率 {rate:g}）；例如 token {token} 出现的频率是 {got:.3f}，而目标模型给它的"
        "概率是 {want:.3f}。{hint}",
    "{n} draws, chi-square p = {pvalue:.2f} ({df} d.o.f.)":
        "{n} 次抽样，卡方检验 p = {pvalue:.2f}（自由度 {df}）",
    "{what} returned {out!r}; it should return a list of token ids (Python ints)":
        "{what} 返回了 {out!r}；它应返回一个 token ID 列表（Python int）",
    "extend needs at least one token id.": "extend 至少需要一个 token ID。",
    "token ids must be in 0..{last}, got {ids}.": "token ID 必须在 0..{last} 之间，实际是 {ids}。",
    "{total} tokens do not fit in this cache: a step that never gives back rejected tokens' pages "
    "runs out of them.":
        "{total} 个 token 放不进这个缓存：如果一步从不归还被拒绝 token 所占的页，页就会被用光。",
    # accept.py
    "{what} changed its arguments; read them, do not modify them":
        "{what} 修改了它的参数；请只读取，不要修改它们",
    "{what} returned {got}, expected {want}. {hint}": "{what} 返回了 {got}，应为 {want}。{hint}",
    "keeps the drafts up to the first that differs from the target's argmax, then adds the "
    "target's own token there":
        "保留草稿，直到第一个与目标模型的 argmax 不同的草稿为止，然后在那里加上目标模型自己的 "
        "token",
    "Draft i is accepted only while every draft before it was: after the first disagreement the "
    "target's later rows were computed after a token that will not be in the sequence, so they "
    "mean nothing. The token added is target_argmax at the first disagreement (what the target "
    "would have generated there).":
        "只有在草稿 i 之前的每个草稿都被接受时，草稿 i 才可能被接受：第一次不一致之后，目标模型"
        "后面的各行是接在一个不会留在序列中的 token 之后算出来的，因此没有意义。加上的 token 是"
        "第一次不一致处的 target_argmax（目标模型在那里本来会生成的 token）。",
    "{n} cases": "{n} 个用例",
    "all k drafts right: all of them and the bonus token, k + 1 tokens":
        "k 个草稿全对：全部保留，再加上奖励 token，共 k + 1 个 token",
    "When every draft agrees, the target's last row (after all k drafts) still gives one more "
    "token for free: target_argmax[k].":
        "每个草稿都一致时，目标模型的最后一行（在全部 k 个草稿之后）还能白送一个 token："
        "target_argmax[k]。",
    "no drafts (k = 0) or the first one wrong: exactly one token, the target's":
        "没有草稿（k = 0）或第一个草稿就错了：恰好一个 token，即目标模型的 token",
    "With no drafts a step is a plain decode step: the target's one token.":
        "没有草稿时，一步就是普通的解码步：输出目标模型的一个 token。",
    "A wrong first draft is not emitted: the target's token replaces it, and the step still "
    "gives one token, as a plain decode step would.":
        "错误的第一个草稿不会被输出：目标模型的 token 取代它，这一步仍然给出一个 token，"
        "和普通的解码步一样。",
    # rejection.py
    "{what} returned {n} tokens; a step emits 1 to k + 1 = {most} (the accepted drafts and one "
    "more)":
        "{what} 返回了 {n} 个 token；一步输出 1 到 k + 1 = {most} 个（被接受的草稿，再加一个）",
    "{what} returned {out}: all but its last token must be the first drafts, {drafts}; a step "
    "emits a prefix of the drafts and then one token of its own":
        "{what} 返回了 {out}：除最后一个 token 外，其余都必须是开头的那几个草稿 {drafts}；"
        "一步输出草稿的一个前缀，再加上一个自己的 token",
    "{what} returned {out}: ids outside 0..{last}": "{what} 返回了 {out}：有 ID 超出了 0..{last}",
    "returns the accepted drafts and one more token, as Python ints; the same generator seed "
    "gives the same tokens":
        "以 Python int 返回被接受的草稿和另外一个 token；生成器的种子相同，token 也相同",
    "rejection_sample gave {first} and then {second} with two generators seeded alike: draw "
    "every random number (the acceptance test's uniform number too) from the generator it is "
    "given":
        "用两个种子相同的生成器，rejection_sample 先给出 {first}，又给出 {second}："
        "每个随机数（包括接受检验用的那个均匀随机数）都要从传入的生成器中抽取",
    "exact cases: q = p accepts every draft; a draft the target gives probability 0 is never "
    "accepted; a corrected token is never the draft it replaces when the drafter was sure":
        "精确用例：q = p 时接受每个草稿；目标模型给出概率 0 的草稿永远不会被接受；"
        "草稿器确定地提出草稿时，修正后的 token 绝不会是它所取代的那个草稿",
    "draft_probs equal to target_probs (the drafter is the target) should accept all {k} "
    "drafts, since min(1, p/q) = 1; got {out} for drafts {drafts}":
        "draft_probs 等于 target_probs（草稿器就是目标模型）时应接受全部 {k} 个草稿，"
        "因为 min(1, p/q) = 1；但对草稿 {drafts} 得到的是 {out}",
    "draft {draft} has target probability 0 at its position, so it must be rejected and "
    "replaced by a token the target can emit; got {out}":
        "草稿 {draft} 在它的位置上目标概率为 0，所以必须被拒绝，并换成一个目标模型能输出的 "
        "token；实际得到 {out}",
    "draft {draft} (proposed for sure: q = 1) was rejected at position {i}, yet the token "
    "emitted there is {out}, the same token. The correction comes from the residual "
    "max(0, p - q), normalised, which is 0 at the rejected token":
        "草稿 {draft}（确定地提出：q = 1）在位置 {i} 被拒绝了，可那里输出的 token 却是 {out}，"
        "正是同一个 token。修正的 token 取自归一化后的残差 max(0, p - q)，"
        "它在被拒绝的 token 上为 0",
    "{n} steps": "{n} 步",
    "the first token emitted follows the target's distribution (chi-square over 4000 steps per "
    "case, false-alarm rate 0.0001), whatever the drafter proposed":
        "无论草稿器提出什么，输出的第一个 token 都服从目标模型的分布"
        "（每个用例 4000 步的卡方检验，误报率 0.0001）",
    "an unrelated drafter": "一个与目标模型无关的草稿器",
    "a sure drafter (one-hot q)": "一个确定的草稿器（one-hot 的 q）",
    "a drafter near the target": "一个接近目标模型的草稿器",
    "k = {k}, {drafter}: the first token": "k = {k}，{drafter}，第一个 token",
    "Accept draft d with probability min(1, p(d) / q(d)); when it is rejected, draw from "
    "max(0, p - q) normalised to sum to 1: together the two give exactly p.":
        "以概率 min(1, p(d) / q(d)) 接受草稿 d；被拒绝时，从归一化到总和为 1 的 max(0, p - q) "
        "中抽取：两者合起来恰好给出 p。",
    "{note} (and {more} more cases)": "{note}（另有 {more} 个用例）",
    "after accepted drafts, the next token follows the target's row at its position, the bonus "
    "token included (chi-square, false-alarm rate 0.0001)":
        "在被接受的草稿之后，下一个 token 服从目标模型在该位置上的那一行，奖励 token 也一样"
        "（卡方检验，误报率 0.0001）",
    "the bonus token": "奖励 token",
    "token {pos}": "位置 {pos} 上的 token",
    "k = {k}, {what} (after {pos} accepted draft(s))":
        "k = {k}，{what}（在 {pos} 个被接受的草稿之后）",
    "Row i of target_probs is the target's distribution at draft i's position (row k after all "
    "k drafts): an accepted draft moves on to the next row, and the bonus token is drawn from "
    "the target's last row, not the drafter's.":
        "target_probs 的第 i 行是目标模型在草稿 i 所在位置上的分布（全部 k 个草稿之后是第 k 行）："
        "草稿被接受后就移到下一行，奖励 token 从目标模型的最后一行中抽取，而不是草稿器的。",
    "k = {k}: only {n} of {trials} steps accepted the first {pos} draft(s) of a drafter close to "
    "the target; accept with probability min(1, p(d) / q(d)).":
        "k = {k}：草稿器接近目标模型，{trials} 步中却只有 {n} 步接受了前 {pos} 个草稿；"
        "应以概率 min(1, p(d) / q(d)) 接受。",
    # step.py
    "{what}: the target's cache holds {n} tokens afterwards, {end} at its end; it should hold "
    "exactly tokens + new[:-1] ({want} tokens, ending {want_end}). {rollback}The last new token "
    "has no K/V yet: the next step computes it.":
        "{what}：这一步之后，目标模型的缓存存有 {n} 个 token，末尾是 {end}；它应当恰好存有 "
        "tokens + new[:-1]（{want} 个 token，末尾是 {want_end}）。{rollback}"
        "最后一个新 token 还没有 K/V：由下一步来计算。",
    "The K/V of rejected drafts must be given back: truncate the cache to the tokens that stay. ":
        "被拒绝草稿的 K/V 必须归还：把缓存截断到保留下来的 token。",
    "{what}: the drafter's cache holds {n} tokens afterwards, ending {end}; it should hold a "
    "prefix of tokens + new[:-1] ({want} tokens), at least the {at_least} tokens of `tokens`: "
    "{advice}":
        "{what}：这一步之后，草稿器的缓存存有 {n} 个 token，末尾是 {end}；它应当存有 "
        "tokens + new[:-1]（{want} 个 token）的一个前缀，至少包含 `tokens` 的 {at_least} 个 "
        "token：{advice}",
    "truncate away the drafts that were rejected.": "把被拒绝的草稿截断掉。",
    "keep the K/V of the context it has computed.": "保留它已经算好的上下文的 K/V。",
    "{what}: the {role}'s cache holds {n} tokens but {held} pages ({lent} lent), not {pages}: "
    "use CachedLM.truncate, which gives the pages past the kept tokens back":
        "{what}：{role}的缓存存有 {n} 个 token，却占着 {held} 页（借出了 {lent} 页），"
        "而不是 {pages} 页：请用 CachedLM.truncate，它会把保留的 token 之后的页归还",
    "target": "目标模型",
    "draft": "草稿器",
    "speculative_step(target, draft, tokens ({n} tokens), k={k}{temperature})":
        "speculative_step(target, draft, tokens（共 {n} 个 token）, k={k}{temperature})",
    "{what} returned {n} tokens; a step emits 1 to k + 1 = {most}":
        "{what} 返回了 {n} 个 token；一步输出 1 到 k + 1 = {most} 个",
    "greedy, two small random Qwen3s on the engine's paged cache (k = 1..4, three prompts): "
    "exactly the tokens of plain greedy decoding, and both caches right after every step":
        "贪心：两个小型随机 Qwen3 跑在引擎的分页缓存上（k = 1..4，三个提示词），token 与普通"
        "贪心解码完全一致，且每一步之后两个缓存都正确",
    "k = {k}, prompt {prompt}: {got} instead of plain greedy decoding's {want}, from new token "
    "{i} on. At temperature 0 every emitted token must be the target's argmax after everything "
    "before it: accept drafts while they equal it, then add the target's own token.":
        "k = {k}，提示词 {prompt}：得到的是 {got}，而普通贪心解码是 {want}，从新 token {i} "
        "开始不同。温度为 0 时，输出的每个 token 都必须是目标模型在它之前全部内容之后的 "
        "argmax：草稿与它相等就接受，然后加上目标模型自己的 token。",
    "no draft was ever accepted, though the drafter agrees with the target most of the time: "
    "compare each draft with the target's argmax at its own position":
        "一个草稿都没有被接受过，而草稿器在大多数时候都与目标模型一致：把每个草稿与目标模型在该"
        "草稿所在位置上的 argmax 相比较",
    "the same tokens for every prompt and k": "每个提示词、每个 k 都得到相同的 token",
    "caches after every step, greedy and sampled, page sizes 1 to 4 (stand-in models): the "
    "target holds tokens + new[:-1], no rejected draft keeps its K/V or its page":
        "每一步之后的缓存，贪心与采样，页大小 1 到 4（替身模型）：目标模型存有 "
        "tokens + new[:-1]，被拒绝的草稿不保留它的 K/V 和页",
    "sampled (temperature 0.8, k = 1 and 3, stand-in models): the first two tokens follow the "
    "target's joint distribution (chi-square over 2500 runs, false-alarm rate 0.0001)":
        "采样（温度 0.8，k = 1 和 3，替身模型）：前两个 token 服从目标模型的联合分布"
        "（2500 次运行的卡方检验，误报率 0.0001）",
    "k = {k}, the first two tokens after {prompt}": "k = {k}，{prompt} 之后的前两个 token",
    "Draw each draft from the drafter's distribution at the same temperature (the q you pass on "
    "must be the distribution the draft was drawn from), take the target's k + 1 rows at the "
    "drafts' positions, and let rejection_sample decide.":
        "在同一温度下从草稿器的分布中抽取每个草稿（你传下去的 q 必须是该草稿实际抽自的分布），"
        "取目标模型在各草稿位置上的 k + 1 行，再交给 rejection_sample 决定。",
    "calls your own accept_greedy (temperature 0) and rejection_sample (temperature > 0)":
        "调用你自己的 accept_greedy（温度 0）和 rejection_sample（温度 > 0）",
    "your speculative_step never called your {missing}: verify the drafts with the functions "
    "you wrote above":
        "你的 speculative_step 从未调用你的 {missing}：请用你在上面写的函数来验证草稿",
    " or ": " 或 ",
}
