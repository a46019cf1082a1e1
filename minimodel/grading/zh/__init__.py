"""The Chinese of every check message: one table per chapter (`ch05.py`: `MESSAGES`, English
template -> Chinese template), and `core.py` for the messages every chapter shares.

Keys are the English templates exactly as `tr(...)` receives them; values keep every `{field}`
(and its format spec) and put them where a Chinese sentence wants them. Terms follow
`book/glossary.md`; code, identifiers, shapes and numbers stay as in the English.
"""
