int main() { return 1; }  // placeholder: being written
