from specguard.cli import run

run()
