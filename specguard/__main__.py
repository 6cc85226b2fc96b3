from specguard.launch import run

run()
