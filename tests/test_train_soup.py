"""pymtp.train.soup: heads on the line between two heads, written as head files."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pymtp.train import selfdistill, soup  # noqa: E402
from pymtp.train.head import HeadConfig, NextNHead, read_head_gguf  # noqa: E402


def _other_head(a: NextNHead) -> NextNHead:
    b = soup.interpolate(a, a, 0.0)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for t in b.state_dict().values():
            t.add_(0.01 * torch.randn(t.shape, generator=g))
    return b


def test_the_ends_are_the_heads_and_the_middle_is_their_mean():
    a = read_head_gguf(selfdistill.SHIPPED, HeadConfig())
    b = _other_head(a)
    sa, sb = a.state_dict(), b.state_dict()
    assert any(not torch.equal(sa[k], sb[k]) for k in sa)
    for w, want in ((0.0, sa), (1.0, sb)):
        got = soup.interpolate(a, b, w).state_dict()
        assert all(torch.allclose(got[k], want[k]) for k in got)
    mid = soup.interpolate(a, b, 0.5).state_dict()
    assert all(torch.allclose(mid[k], (sa[k] + sb[k]) / 2) for k in mid)
    assert all(torch.equal(a.state_dict()[k], sa[k]) for k in sa)  # the inputs are left as they were


def test_the_command_writes_each_soup_as_a_head_file(tmp_path, capsys):
    out = tmp_path / "soups"
    soup.main([str(selfdistill.SHIPPED), str(selfdistill.SHIPPED), "--weights", "0,0.5", "--out-dir", str(out)])
    assert "soup-0.5.gguf" in capsys.readouterr().out
    shipped = read_head_gguf(selfdistill.SHIPPED, HeadConfig()).state_dict()
    got = read_head_gguf(out / "soup-0.5.gguf", HeadConfig()).state_dict()
    # the head file is F16 (norms and the router F32): the shipped head's F16 weights again
    assert all(torch.allclose(got[k], shipped[k], rtol=1e-3, atol=1e-3) for k in got)
    with pytest.raises(ValueError, match="in \\[0, 1\\]"):
        soup.main([str(selfdistill.SHIPPED), str(selfdistill.SHIPPED), "--weights", "1.5", "--out-dir", str(out)])
