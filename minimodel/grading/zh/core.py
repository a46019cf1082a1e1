"""The Chinese of the messages every chapter's checks share (minimodel/grading/core.py,
learner.py, common.py)."""

MESSAGES: dict[str, str] = {
    # results
    "{name}: not implemented yet": "{name}：尚未实现",
    "{name}: {done}/{total} all checks passed": "{name}：{done}/{total}，全部检查通过",
    "{name}: {done}/{total} some checks failed": "{name}：{done}/{total}，有检查未通过",
    "not implemented yet": "尚未实现",
    "raised {error}: {text}{where}": "抛出了 {error}：{text}{where}",
    " (line {line} of {function})": "（{function} 的第 {line} 行）",
    "{message}. {hint}": "{message}。{hint}",
    "No exercise named {name!r}. Known exercises: {known}":
        "没有名为 {name!r} 的练习。已有的练习：{known}",
    # expect_shape, expect_close
    "{what} should be a torch.Tensor, got {got}": "{what} 应当是 torch.Tensor，实际是 {got}",
    "{what} should have shape {want}, got {got}": "{what} 的形状应为 {want}，实际是 {got}",
    "{what} should have dtype {want}, got {got}": "{what} 的 dtype 应为 {want}，实际是 {got}",
    "{what} is off from the expected values: max abs diff {worst:.3g}":
        "{what} 与期望值不符：最大绝对误差 {worst:.3g}",
    # learner.py: loading the learner's own notebooks
    "{path} does not exist.": "{path} 不存在。",
    "No notebook {name}*.ipynb in {folder}. Keep your exercise notebooks together in one "
    "folder (as in exercises/) and run this notebook from there.":
        "{folder} 中没有 {name}*.ipynb。请把你的练习 notebook 放在同一个文件夹里"
        "（就像 exercises/ 那样），并在那里运行这个 notebook。",
    "More than one notebook matches {name!r} in {folder}: {names}.":
        "{folder} 中有不止一个 notebook 与 {name!r} 匹配：{names}。",
    "{name} is set in code cell {cell} of {notebook} by `{line}`, which learner_module does not "
    "run: it loads only imports, def, class and constants written as literals (a call or an "
    "expression of other names is computed only when the cell runs). Move the value into the "
    "function that uses it, or write it as a literal (e.g. -1e30, 1e-6, (1, 2, 4)), save the "
    "notebook and run this cell again.":
        "{name} 是在 {notebook} 的第 {cell} 个代码单元中由 `{line}` 赋值的，而 learner_module "
        "不会运行这一句：它只加载 import、def、class 以及写成字面量的常量（函数调用或由其他名字"
        "组成的表达式，只有在运行该单元时才会计算）。请把这个值移到使用它的函数里，或者把它写成"
        "字面量（例如 -1e30、1e-6、(1, 2, 4)），保存 notebook 后再运行这个单元。",
    "{notebook}, code cell {cell}: {error} (line {line})":
        "{notebook}，第 {cell} 个代码单元：{error}（第 {line} 行）",
    "JupyterLab's checkpoint of {notebook} ({checkpoint}) is newer than the file itself "
    "({saved}): the file may not hold your last version. Open it, save it (Ctrl-S) and run this "
    "cell again.":
        "JupyterLab 为 {notebook} 保存的检查点（{checkpoint}）比文件本身（{saved}）更新：文件里"
        "可能不是你最后的版本。请打开它、保存（Ctrl-S），再运行这个单元。",
    "{notebook}'s kernel checked a different `{name}` at {checked}, after the file was last "
    "saved ({saved}): you have unsaved edits. Save {notebook} (Ctrl-S in its tab) and run this "
    "cell again.":
        "{notebook} 的内核在 {checked} 检查了另一个版本的 `{name}`，晚于文件最后一次保存"
        "（{saved}）：你有未保存的修改。请保存 {notebook}（在它的标签页中按 Ctrl-S），再运行"
        "这个单元。",
    "{name} is not defined anywhere in the saved {notebook}: if you defined it in that "
    "notebook's kernel, save the notebook (Ctrl-S) and run this cell again.":
        "已保存的 {notebook} 中没有任何地方定义 {name}：如果你是在那个 notebook 的内核里定义"
        "的，请保存它（Ctrl-S），再运行这个单元。",
    "{notebook} changed on disk after this notebook loaded it: run the cell with its "
    "learner_module(...) again to load the new version.":
        "{notebook} 被这个 notebook 加载之后，磁盘上的文件又改过了：请重新运行用 "
        "learner_module(...) 加载它的那个单元，载入新版本。",
    "{notebook} changed on disk after it was loaded, so this check ran its old code: run the "
    "cell with its learner_module(...) again, then this check.":
        "{notebook} 加载之后，磁盘上的文件又改过了，所以这次检查运行的是旧代码：请先重新运行用 "
        "learner_module(...) 加载它的那个单元，再运行这个检查。",
    # notebooks.py: `minimodel grade`
    "{path}: cannot read it as a notebook ({error}).":
        "{path}：无法作为 notebook 读取（{error}）。",
    "{path}: the notebook's kernel died while it ran ({error}); run it in Jupyter to see which "
    "cell ends the process (memory, os._exit, a crash), fix that cell and grade again.":
        "{path}：notebook 运行时内核退出了（{error}）；请在 Jupyter 中运行它，找出是哪个单元结束"
        "了进程（内存不足、os._exit、崩溃），修好那个单元后再评分。",
    "{path}: a cell ran longer than {timeout} s, so grading stopped; run the notebook in "
    "Jupyter to find the slow or stuck cell.":
        "{path}：有一个单元运行超过了 {timeout} 秒，评分因此停止；请在 Jupyter 中运行这个 "
        "notebook，找出太慢或卡住的单元。",
    "{path}: there is no Jupyter kernel named 'python3' to run it; install one with "
    "`pip install ipykernel`.":
        "{path}：没有名为 'python3' 的 Jupyter 内核来运行它；"
        "请用 `pip install ipykernel` 安装一个。",
    "{path}: the notebook did not finish, so no results were collected":
        "{path}：notebook 没有运行完，所以没有收集到结果",
    "No notebooks found at {path}": "在 {path} 没有找到 notebook",
    "notebook": "笔记本",
    "exercise": "练习",
    "score": "得分",
    "status": "状态",
    "not implemented": "尚未实现",
    "pass": "通过",
    "fail": "未通过",
    "no checks ran": "没有运行任何检查",
}
