"""The Chinese of chapter 01's check messages (minimodel/grading/ch01.py)."""

MESSAGES: dict[str, str] = {
    # ch01.embed
    "; it looks like every vector is multiplied by sqrt(C): Qwen3 does not scale its embeddings":
        "；看起来每个向量都乘了 sqrt(C)：Qwen3 不对嵌入做缩放",
    "; it looks shifted by one row: id i must read row i (ids start at 0)":
        "；看起来错开了一行：ID i 应当读取第 i 行（ID 从 0 开始）",
    "returns [B, T, C] in the table's dtype, for several sizes and dtypes":
        "返回 [B, T, C]，dtype 与表相同；覆盖多种形状和 dtype",
    "with a {dtype} table the embeddings should be {dtype}, got {got}":
        "表是 {dtype} 时，嵌入也应当是 {dtype}，实际是 {got}",
    "{n} cases": "{n} 个用例",
    "out[b, t] is row ids[b, t] of the table, exactly": "out[b, t] 恰好是表中的第 ids[b, t] 行",
    "with ids [{B}, {T}] and a [{V}, {C}] {dtype} table, out[{b}, {t}] should be row {row} of "
    "the table, but it is not{hint}":
        "用 [{B}, {T}] 的 ids 和 [{V}, {C}] 的 {dtype} 表时，out[{b}, {t}] 应当是表中的第 {row} "
        "行，实际却不是{hint}",
    "checked every position, ids 0 and V-1 included": "检查了每个位置，包括 ID 0 和 V-1",
    "leaves ids and the table unchanged": "不修改 ids 和表",
    "embed changed the ids tensor it was given": "embed 修改了传给它的 ids 张量",
    "embed changed the embedding table it was given": "embed 修改了传给它的嵌入表",
    # ch01.pack
    "pack of {n} sequence": "pack（{n} 个序列）",
    "pack of {n} sequences": "pack（{n} 个序列）",
    "{what} should return a tuple (ids, indptr), got {got}":
        "{what} 应当返回元组 (ids, indptr)，实际是 {got}",
    "{what}: {name} should be a torch.Tensor, got {got}":
        "{what}：{name} 应当是 torch.Tensor，实际是 {got}",
    "{what}: {name} should be torch.long, got {got}":
        "{what}：{name} 应当是 torch.long，实际是 {got}",
    "{what}: {name} should be 1-D, got shape {shape}":
        "{what}：{name} 应当是一维的，实际形状为 {shape}",
    "returns ids Long[N] and indptr Long[B+1]": "返回 ids Long[N] 和 indptr Long[B+1]",
    "ids for sequences of lengths {lens}": "序列长度为 {lens} 时的 ids",
    "indptr for {B} sequences (one start per sequence plus the end)":
        "{B} 个序列的 indptr（每个序列一个起点，再加上终点）",
    "{n} batches": "{n} 个 batch",
    "indptr starts at 0, grows by each length and ends at N":
        "indptr 从 0 开始，依次加上每个序列的长度，最后等于 N",
    "for lengths {lens}, indptr should be {want} (0, then running sums of the lengths), got {got}":
        "序列长度为 {lens} 时，indptr 应为 {want}（先是 0，然后是长度的累加和），实际是 {got}",
    "ids[indptr[i]:indptr[i+1]] is sequence i, in the original order":
        "ids[indptr[i]:indptr[i+1]] 就是序列 i，顺序与原来相同",
    "for lengths {lens}, ids should hold the {want} real tokens and nothing else (no padding), "
    "got {got} ids":
        "序列长度为 {lens} 时，ids 应当只包含那 {want} 个真实 token（不含填充），实际有 {got} 个",
    "for lengths {lens}, ids[{k}] should be token {j} of sequence {i} ({want}), got {got}: ids "
    "holds the sequences one after the other, in their original order":
        "序列长度为 {lens} 时，ids[{k}] 应当是序列 {i} 中下标为 {j} 的 token（{want}），实际是 "
        "{got}：ids 按原来的顺序把各个序列首尾相接地排在一起",
    "leaves the input lists unchanged": "不修改输入的列表",
    "pack changed its input: {before} became {after}":
        "pack 修改了它的输入：{before} 变成了 {after}",
    # ch01.packed_positions
    "returns Long[N], one position per packed token": "返回 Long[N]，打包后的每个 token 一个位置",
    "positions for lengths {lens}": "序列长度为 {lens} 时的位置",
    "positions should be torch.long, got {got}": "位置应当是 torch.long，实际是 {got}",
    "every sequence counts its own positions from 0": "每个序列都从 0 开始计算自己的位置",
    ": the positions keep counting across sequences; each restarts at 0":
        "：位置跨过序列边界一直往下数了；每个序列都应从 0 重新开始",
    ": they start at 1; the first token of a sequence is at position 0":
        "：位置从 1 开始了；序列的第一个 token 位于位置 0",
    "for lengths {lens} (indptr {indptr}) the positions should be {want}, got {got}{hint}":
        "序列长度为 {lens}（indptr 为 {indptr}）时，位置应为 {want}，实际是 {got}{hint}",
    "leaves indptr unchanged": "不修改 indptr",
    "packed_positions changed the indptr it was given": "packed_positions 修改了传给它的 indptr",
}
