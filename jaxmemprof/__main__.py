from jaxmemprof.cli import main

main(prog_name="jaxmemprof")
