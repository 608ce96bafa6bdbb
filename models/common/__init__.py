"""What two or more benchmark families use. Its README.md says what each
file is and which families use it."""
