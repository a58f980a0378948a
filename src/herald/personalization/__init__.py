"""Personalization: sandboxed Jinja templates resolved per user (contract §6) and the C9 preview.

`check_template(text)` is the parser campaign validation uses (C4 DRAFT_PUBLISH): None when the text
is a valid template, else why not.
"""

from herald.personalization.compiling import check_template

__all__ = ["check_template"]
