"""Job ids: an epoch knows the ids it issued, and when, and no others."""

from __future__ import annotations

from inferd.jobs.epoch import ID_CHARS, Epoch, new_secret


def test_an_epoch_knows_its_own_ids_and_when_it_issued_them() -> None:
    epoch = Epoch(new_secret())
    job_id = epoch.issue(1_700_000_000.25)
    assert len(job_id) == ID_CHARS and job_id.startswith(epoch.tag)
    assert epoch.issued_at(job_id) == 1_700_000_000.25


def test_an_id_of_another_epoch_or_altered_is_not_known() -> None:
    epoch, other = Epoch(new_secret()), Epoch(new_secret())
    job_id = epoch.issue(1_700_000_000.0)
    assert other.issued_at(job_id) is None
    later = job_id[:8] + f"{1_800_000_000_000:011x}" + job_id[19:]  # a later time, same MAC
    assert epoch.issued_at(later) is None
    for wrong in ("", "0" * ID_CHARS, job_id[:-1], job_id + "0", job_id.upper(), "x" * ID_CHARS):
        assert epoch.issued_at(wrong) is None
