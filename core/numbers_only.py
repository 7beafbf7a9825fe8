"""A pydantic base whose number fields take numbers only: `true`, `false` (and YAML's `yes`, `no`,
`on`, `off`) would otherwise be read as 1 and 0, and text ("1_0", "06", "+6") as the number it
spells, a typo trained on without a word."""

from __future__ import annotations

import types
from typing import Annotated, Union, get_args, get_origin

from pydantic import BaseModel, model_validator
from pydantic_core import PydanticCustomError


def is_number_type(annotation) -> bool:
    """int, float, or an Optional / union / Annotated of them."""
    if annotation in (int, float):
        return True
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Annotated:
        return is_number_type(args[0])
    if origin in (Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        return bool(kinds) and all(is_number_type(a) for a in kinds)
    return False


def _spells_a_number(text: str) -> bool:
    """Whether pydantic would read `text` as a number ("1_0" as 10, " 6" as 6); other text it refuses itself."""
    try:
        float(text)
    except ValueError:
        return False
    return True


class NumbersOnly(BaseModel):
    """Refuses a boolean or a text where a field wants a number."""

    @model_validator(mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, data):
        if isinstance(data, dict):
            for name, field in cls.model_fields.items():
                value = data.get(field.alias or name)
                if isinstance(value, bool) and is_number_type(field.annotation):
                    raise PydanticCustomError("number", f"{name}: must be a number, got {str(value).lower()} "
                                              "(YAML also reads yes, no, on, off as booleans)")
                if isinstance(value, str) and is_number_type(field.annotation) and _spells_a_number(value):  # "1_0": 10
                    raise PydanticCustomError("number", f"{name}: must be a number, got the text {value[:40]!r} "
                                              "(a number in quotes is text: write it without them)")
        return data
