from engine.runtime import demo


def test_demo_prints_the_design_board(capsys):
    assert demo.main() == 0
    out = capsys.readouterr().out
    assert "1. p-ava" in out and "rank of p-chloe: 3" in out
    assert out.index("p-ben") < out.index("p-chloe")
