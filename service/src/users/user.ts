/** A user as the API shows one (never the password hash): a caller, a post's owner. */
export interface User {
  id: number;
  email: string;
  created_at: Date;
}
