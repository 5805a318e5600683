"""The station's profiles are the names the server accepts at enrolment
(``proctor.core.domain.StationProfile``): the server checks a profile without
importing the station, so the two lists must be one."""

from __future__ import annotations

from proctor.core.domain import StationProfile
from proctor.station.profiles import PROFILES


def test_every_profile_the_server_accepts_is_one_the_station_can_build() -> None:
    assert PROFILES.names() == [p.value for p in StationProfile]
    # each resolves to its module (sim needs no extras, so it loads here)
    assert callable(PROFILES.get(StationProfile.sim.value))
