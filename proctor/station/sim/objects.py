"""The simulated cell's object types: the four PhAIL objects and what makes
each easy or hard to pick.

Finger positions are normalised like the 2F-85 (0 open, 1 closed; 85 mm
stroke), so ``hold_position = 1 − width / 85 mm`` where the fingers stop on
the part they grip. Grasp success falls off with the aim error as
``base · exp(−½ (d / tolerance)²)``; while held, an item slips with hazard
``slip_rate · (1 + (v / 0.5 m/s)²)`` per second (fast transfers shake
things loose).

The fingers first touch an item at ``hold_position`` and then close on a
little further while the pads and the item compress under the grip force:
``squeeze`` (finger travel at the default force, 0.5; 0.01 ≈ 0.85 mm) is
about half a millimetre for wood or metal and several millimetres for a
folded towel. Opening, the item comes free only once the fingers are past
its width by a margin drawn per grasp up to ``release_clearance``: an item
held off-centre or tilted in the pads needs the wider gap, and cloth springs
back as the fingers open and follows them for a while. So the item leaves
the fingers ``squeeze`` + margin below where they stood, a distance the
release detector cannot know from the recorded signals.
"""

from __future__ import annotations

from dataclasses import dataclass

from proctor.core.errors import UsageError


@dataclass(frozen=True)
class ObjectSpec:
    name: str
    display_name: str
    tags: tuple[str, ...]
    prompt: str
    length: float  # m, along the item's long axis
    width: float  # m
    height: float  # m, resting on a flat floor
    color: tuple[int, int, int]  # RGB for the rendered cameras
    hold_position: float  # finger position when gripping it
    grasp_base: float  # success probability of a perfectly aimed, still grasp
    grasp_tolerance: float  # m: aim error at which success drops to base·e^(−½)
    slip_rate: float  # 1/s while held at rest
    rolls: float = 1.0  # how far it slides or rolls on after landing on the table (1: a flat item)
    squeeze: float = 0.005  # finger travel past the first touch at the default force
    release_clearance: float = 0.02  # at most this far past its width before it comes free

    @property
    def radius(self) -> float:
        """Half the item's larger footprint dimension: how far from its centre it reaches."""
        return max(self.length, self.width) / 2


OBJECTS: dict[str, ObjectSpec] = {
    o.name: o
    for o in (
        ObjectSpec(
            name="spoons",
            display_name="Wooden spoons",
            tags=("rigid", "elongated"),
            prompt="put the wooden spoons from the source bin into the target bin",
            length=0.20,
            width=0.035,
            height=0.015,
            color=(196, 150, 92),
            hold_position=0.86,
            grasp_base=0.93,
            grasp_tolerance=0.014,
            slip_rate=0.010,
            squeeze=0.006,  # ≈ 0.5 mm into wood and the pads
            release_clearance=0.025,  # a long handle held off-centre tilts in the pads
        ),
        ObjectSpec(
            name="towels",
            display_name="Towels",
            tags=("deformable",),
            prompt="put the towels from the source bin into the target bin",
            length=0.12,
            width=0.10,
            height=0.03,
            color=(70, 130, 200),
            hold_position=0.80,
            grasp_base=0.96,
            grasp_tolerance=0.028,
            slip_rate=0.006,
            squeeze=0.05,  # ≈ 4 mm into folded cloth
            release_clearance=0.04,  # the cloth springs back and follows the pads
        ),
        ObjectSpec(
            name="scissors",
            display_name="Scissors",
            tags=("articulated", "metallic"),
            prompt="put the scissors from the source bin into the target bin",
            length=0.17,
            width=0.07,
            height=0.012,
            color=(200, 60, 60),
            hold_position=0.88,
            grasp_base=0.85,
            grasp_tolerance=0.010,
            slip_rate=0.030,
            squeeze=0.004,
            release_clearance=0.02,
        ),
        ObjectSpec(
            name="batteries",
            display_name="Batteries",
            tags=("rigid", "small"),
            prompt="put the batteries from the source bin into the target bin",
            length=0.05,
            width=0.0145,
            height=0.0145,
            color=(60, 60, 60),
            hold_position=0.83,
            grasp_base=0.90,
            grasp_tolerance=0.007,
            slip_rate=0.020,
            rolls=4.0,  # cylinders roll
            squeeze=0.003,
            release_clearance=0.012,  # a cylinder rolls out as soon as the gap opens
        ),
    )
}


def object_spec(name: str) -> ObjectSpec:
    try:
        return OBJECTS[name]
    except KeyError:
        raise UsageError(
            f"object: the simulated cell has no '{name}'; it knows {', '.join(sorted(OBJECTS))}"
        ) from None
