"""The base of every component's typed options, and how options reach a running component.

Each stage owns its options as a class next to the code that uses them
(`components/<stage>/options.py`); `pipeline/config.py` only composes them into the user-facing
configuration. Options cross from the pipeline definition to an executor in one way: as the JSON
text of the options object (`to_parameter`), one execution parameter (or, for TFX's stock
component specs that only have `custom_config`, one `custom_config` entry) per options class,
parsed back by the executor with the same class (`from_parameter`). Locations that depend on the
runner (serving directory, state location, registry directory) are plain string parameters.
"""

from typing import Type, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

_O = TypeVar("_O", bound="Options")


class Options(BaseModel):
    """Strict about unknown keys, validates on assignment, and crosses to executors as JSON."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def to_parameter(self) -> str:
        """The options as the JSON text a component parameter carries."""
        return self.model_dump_json()

    @classmethod
    def from_parameter(cls: Type[_O], text: str) -> _O:
        """Parses `to_parameter`'s text; an error names the options class and the bad keys."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in item['loc']) or '<root>'}: {item['msg']}" for item in exc.errors()
            )
            raise ValueError(f"invalid {cls.__name__} parameter: {problems}") from None
