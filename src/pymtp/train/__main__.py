from .distill import main

main()
