"""The search's results on three zoo models are pinned (analytic cost, frozen rule file): refactors keep them."""
import json

import pytest
from search_pins import PIN_FILE, search_results


@pytest.mark.slow  # 11 s: room in the default suite (its 6-minute margin)
def test_search_results_match_the_pins():
    pinned = json.loads(PIN_FILE.read_text())
    got = search_results()
    assert sorted(got) == sorted(pinned)
    for name in pinned:
        assert got[name]["cost_before"] == pinned[name]["cost_before"], name
        assert got[name]["cost_after"] == pinned[name]["cost_after"], name
        assert got[name]["rules_applied"] == pinned[name]["rules_applied"], name
        assert got[name]["graph"] == pinned[name]["graph"], name
